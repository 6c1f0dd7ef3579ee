package config

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/txm"
)

// Shard is one PostgreSQL database holding a share of the signers
// (TXFENCE_DATABASES). Pool size, timeouts and the Cloud SQL options come
// from the Database settings, which apply to every shard.
type Shard struct {
	Name     string // [a-z][a-z0-9_-]*, at most 32 characters; names the shard in cursors and logs
	URL      string
	Instance string // a Cloud SQL instance connection name, or ""
}

// ShardMap assigns each signer to the shard that holds its nonces, leases,
// transactions and completions (TXFENCE_SHARD_MAP). It is versioned: a
// shard records the highest version that used it, and a process whose map
// is older is refused there (see postgres.ClaimShard).
type ShardMap struct {
	Version int64
	Signers map[common.Address]string // explicit ADDRESS=SHARD rules
	Default string                    // the *=SHARD rule, "" when there is none
}

// Environment variables of sharding.
const (
	// EnvDatabases lists the shards: NAME[@PROJECT:REGION:INSTANCE]=URL,
	// separated by "|". It replaces TXFENCE_DATABASE_URL (one database).
	EnvDatabases = "TXFENCE_DATABASES"
	// EnvShardMap is the signer → shard map: vN:RULE[,RULE...], RULE being
	// ADDRESS=SHARD or *=SHARD (the default).
	EnvShardMap = "TXFENCE_SHARD_MAP"
)

var shardName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// Sharded reports whether TXFENCE_DATABASES names the databases. When it
// does not, TXFENCE_DATABASE_URL is the one database, an unnamed shard
// holding every signer. Only the configuration's loading and checks ask:
// the code that serves is the same for one shard and many.
func (c Config) Sharded() bool { return len(c.Shards) > 0 }

// ShardDatabase is one database to connect to: its shard name ("" for the
// single TXFENCE_DATABASE_URL) and its connection settings.
type ShardDatabase struct {
	Name     string
	Database Database
}

// Databases lists the databases to connect to, in configuration order (the
// first is the home shard, which also holds policies, API keys and the
// audit log). Without TXFENCE_DATABASES it is the one database, named "".
func (c Config) Databases() []ShardDatabase {
	if !c.Sharded() {
		return []ShardDatabase{{Database: c.Database}}
	}
	out := make([]ShardDatabase, len(c.Shards))
	for i, s := range c.Shards {
		d := c.Database
		d.URL, d.Instance = s.URL, s.Instance
		out[i] = ShardDatabase{Name: s.Name, Database: d}
	}
	return out
}

// ShardFor is the shard of signer: its explicit rule, else the default. A
// deployment with one database (or one shard and no map) puts every signer
// in it.
func (c Config) ShardFor(signer common.Address) (string, bool) {
	rules, def, ok := c.shardRules()
	if s, found := rules[signer]; found {
		return s, true
	}
	return def, ok
}

// ShardLookup is ShardFor reduced to one map lookup, for routing every
// call: the configuration is read once, here.
func (c Config) ShardLookup() func(common.Address) (string, bool) {
	rules, def, ok := c.shardRules()
	return func(signer common.Address) (string, bool) {
		if s, found := rules[signer]; found {
			return s, true
		}
		return def, ok
	}
}

// shardRules are the explicit signer → shard rules and the default shard
// (ok false: a signer without a rule is in no shard). The one database of
// TXFENCE_DATABASE_URL, named "", holds every signer; so does a single
// shard without a map.
func (c Config) shardRules() (rules map[common.Address]string, def string, ok bool) {
	switch {
	case !c.Sharded():
		return nil, "", true
	case len(c.Shards) == 1 && c.ShardMap.Version == 0:
		return nil, c.Shards[0].Name, true
	}
	return c.ShardMap.Signers, c.ShardMap.Default, c.ShardMap.Default != ""
}

// databases parses NAME[@PROJECT:REGION:INSTANCE]=URL[|...].
func (p *parser) databases(env string, dst *[]Shard) {
	v, ok := p.get(env)
	if !ok {
		return
	}
	var out []Shard
	seen := map[string]bool{}
	for _, entry := range strings.Split(v, "|") {
		entry = strings.TrimSpace(entry)
		head, url, found := strings.Cut(entry, "=")
		name, instance, _ := strings.Cut(strings.TrimSpace(head), "@")
		url = strings.TrimSpace(url)
		if !found || url == "" {
			p.bad(env, "entry %q must be NAME=URL or NAME@PROJECT:REGION:INSTANCE=URL, entries separated by |", entry)
			return
		}
		if !shardName.MatchString(name) {
			p.bad(env, "shard name %q must be a lowercase letter then up to 31 of a-z, 0-9, _ and -", name)
			return
		}
		if seen[name] {
			p.bad(env, "shard %q is listed twice", name)
			return
		}
		seen[name] = true
		if instance != "" && strings.Count(instance, ":") != 2 {
			p.bad(env, "shard %q: %q must be an instance connection name project:region:instance", name, instance)
			return
		}
		out = append(out, Shard{Name: name, URL: url, Instance: instance})
	}
	*dst = out
}

// shardMap parses vN:RULE[,RULE...] with RULE one of ADDRESS=SHARD and
// *=SHARD. Whether the shards exist and every signer has one is checked by
// validate.
func (p *parser) shardMap(env string, dst *ShardMap) {
	v, ok := p.get(env)
	if !ok {
		return
	}
	version, rules, found := strings.Cut(v, ":")
	n, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(version), "v"), 10, 64)
	if !found || !strings.HasPrefix(strings.TrimSpace(version), "v") || err != nil || n < 1 {
		p.bad(env, "must start with its version, vN: (N a positive integer), then RULE[,RULE...]; got %q", v)
		return
	}
	m := ShardMap{Version: n, Signers: map[common.Address]string{}}
	for _, rule := range strings.Split(rules, ",") {
		scope, shard, found := strings.Cut(strings.TrimSpace(rule), "=")
		scope, shard = strings.TrimSpace(scope), strings.TrimSpace(shard)
		if !found || shard == "" {
			p.bad(env, "rule %q must be ADDRESS=SHARD or *=SHARD", rule)
			return
		}
		if scope == "*" {
			if m.Default != "" {
				p.bad(env, "the default rule *=SHARD is given twice")
				return
			}
			m.Default = shard
			continue
		}
		a, err := txm.ParseAddress(scope)
		if err != nil {
			p.bad(env, "rule %q: %v", rule, err)
			return
		}
		if _, dup := m.Signers[a]; dup {
			p.bad(env, "signer %s has two rules", txm.CanonicalAddress(a))
			return
		}
		m.Signers[a] = shard
	}
	*dst = m
}

// validateShards checks the databases and the map against each other and
// against the signers: every configured signer is in exactly one known
// shard.
func (c Config) validateShards(bad func(env, format string, args ...any)) {
	if !c.Sharded() && !c.databasesSet {
		if c.Database.URL == "" {
			bad(EnvDatabaseURL, "is required (a PostgreSQL connection string; with %s it names user and database), or %s for several databases",
				EnvCloudSQLInstance, EnvDatabases)
		}
		if c.Database.Instance != "" && strings.Count(c.Database.Instance, ":") != 2 {
			bad(EnvCloudSQLInstance, "must be an instance connection name project:region:instance, got %q", c.Database.Instance)
		}
		if c.ShardMap.Version != 0 {
			bad(EnvShardMap, "needs %s: with one database every signer is in it", EnvDatabases)
		}
		return
	}
	if c.Database.URL != "" {
		bad(EnvDatabases, "and %s are exclusive: list every database, the first included, in %s", EnvDatabaseURL, EnvDatabases)
	}
	if c.Database.Instance != "" {
		bad(EnvCloudSQLInstance, "must not be set with %s: name each shard's instance there (NAME@PROJECT:REGION:INSTANCE=URL)", EnvDatabases)
	}
	if !c.Sharded() {
		return // TXFENCE_DATABASES did not parse; its problem is reported
	}
	known := map[string]bool{}
	for _, s := range c.Shards {
		if !shardName.MatchString(s.Name) || s.URL == "" || (s.Instance != "" && strings.Count(s.Instance, ":") != 2) {
			bad(EnvDatabases, "shard %q must have a valid name, a URL and, if any, an instance project:region:instance", s.Name)
		}
		known[s.Name] = true
	}
	if c.ShardMap.Version == 0 {
		if len(c.Shards) > 1 {
			bad(EnvShardMap, "is required with several databases in %s: vN:ADDRESS=SHARD,...[,*=SHARD]", EnvDatabases)
		}
		return
	}
	if c.ShardMap.Default != "" && !known[c.ShardMap.Default] {
		bad(EnvShardMap, "the default rule names shard %q, which is not in %s", c.ShardMap.Default, EnvDatabases)
	}
	for a, s := range c.ShardMap.Signers {
		if !known[s] {
			bad(EnvShardMap, "signer %s is assigned to shard %q, which is not in %s", txm.CanonicalAddress(a), s, EnvDatabases)
		}
		if _, ok := c.Signer(a); !ok {
			bad(EnvShardMap, "signer %s is not in %s", txm.CanonicalAddress(a), EnvSigners)
		}
	}
	for _, s := range c.Signers {
		if _, ok := c.ShardFor(s.Address); !ok {
			bad(EnvShardMap, "signer %s has no shard: give it a rule ADDRESS=SHARD or add a default *=SHARD", txm.CanonicalAddress(s.Address))
		}
	}
}

// String renders the map in its variable's syntax, rules sorted:
// the same map always gives the same text (shards record its digest).
func (m ShardMap) String() string {
	rules := make([]string, 0, len(m.Signers)+1)
	for a, s := range m.Signers {
		rules = append(rules, txm.CanonicalAddress(a)+"="+s)
	}
	sort.Strings(rules)
	if m.Default != "" {
		rules = append(rules, "*="+m.Default)
	}
	return fmt.Sprintf("v%d:%s", m.Version, strings.Join(rules, ","))
}

// LoadDatabases reads only the database settings, for the commands that
// need no chains or signers (migrate, admin): the databases to connect to,
// the home shard first. The error names every bad variable, as Load's.
func LoadDatabases(lookup func(string) (string, bool)) ([]ShardDatabase, error) {
	c := Defaults()
	p := parser{lookup: lookup}
	p.str(EnvDatabaseURL, &c.Database.URL)
	p.str(EnvCloudSQLInstance, &c.Database.Instance)
	p.boolean(EnvCloudSQLIAMAuth, &c.Database.IAMAuth)
	p.boolean(EnvCloudSQLPrivateIP, &c.Database.PrivateIP)
	p.int32(EnvDBMaxConns, &c.Database.MaxConns)
	p.databases(EnvDatabases, &c.Shards)
	_, c.databasesSet = p.get(EnvDatabases)
	if len(p.errs) == 0 {
		// The map is not needed to reach the databases; its rules are
		// checked where signers are configured.
		c.validateShards(func(env, format string, args ...any) {
			if env != EnvShardMap {
				p.bad(env, format, args...)
			}
		})
	}
	if len(p.errs) > 0 {
		return nil, &Error{Problems: p.errs}
	}
	return c.Databases(), nil
}
