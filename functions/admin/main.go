// Command admin manages who may call txfence: API keys and policies. It
// talks to the database directly, like migrate, and records every change
// in the audit log as "cli:" + $USER.
//
//	admin apikey create --principal P     print a new API key for P, once
//	admin apikey create --principal P --secret projects/PROJECT/secrets/S
//	                                      write it as a new version of that secret instead
//	admin apikey revoke --id k_...        the key is refused from now on
//	admin apikey list [--principal P]     ids, owners, dates; never secrets
//	admin policy put --file policy.json   write P's next policy version ("-": stdin)
//	admin policy show --principal P       P's policy in force
//	admin audit list [--principal P] [--limit N]
//	admin bootstrap --principal P --secret projects/PROJECT/secrets/S
//	                                      the first admin: P gets the admin role on
//	                                      every signer (unless it has a policy) and an
//	                                      API key, written to the secret; nothing if P
//	                                      has a key already
//
// An API key is printed once, on stdout, and only its hash is stored: keep
// it in a secret manager when it is shown, for it cannot be shown again.
// Lose it, and revoke it and create another. A key does nothing until its
// principal has a policy (txfence is closed by default). With --secret the
// key goes to Secret Manager (as the command's service account, which
// needs roles/secretmanager.secretVersionAdder on that secret) and is
// never printed: that is how the admin job of terraform, whose output goes
// to Cloud Logging, makes the first credential.
//
// A policy file is the JSON wire form of txm.Policy; docs/policies.md gives
// every field, the roles and an example.
//
// Unknown fields are refused, so a misspelt limit is not silently dropped.
//
// The database is named the way every txfence process names it:
// TXFENCE_DATABASE_URL, and for Cloud SQL TXFENCE_CLOUDSQL_INSTANCE,
// TXFENCE_CLOUDSQL_IAM_AUTH and TXFENCE_CLOUDSQL_PRIVATE_IP; or, when
// signers are sharded, TXFENCE_DATABASES, whose first (home) shard holds
// policies, API keys and the audit log.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txfence/txfence/shared/auth"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/postgres"
	"github.com/txfence/txfence/shared/secrets"
	"github.com/txfence/txfence/shared/txm"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	err := run(ctx, os.Args[1:], cmdEnv{getenv: os.Getenv, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		secrets: func(ctx context.Context) (secretWriter, error) { return secrets.New(ctx) }})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "admin:", err)
		if errors.Is(err, errUsage) {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		os.Exit(1)
	}
}

const usage = `usage:
  admin apikey create --principal P [--secret projects/PROJECT/secrets/SECRET]
  admin apikey revoke --id k_...
  admin apikey list [--principal P]
  admin policy put --file policy.json (or - for stdin; the format: docs/policies.md)
  admin policy show --principal P
  admin audit list [--principal P] [--limit N]
  admin bootstrap --principal P --secret projects/PROJECT/secrets/SECRET
`

var errUsage = errors.New("usage")

// cmdEnv is what the command reads and writes besides the database.
type cmdEnv struct {
	getenv         func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer
	// secrets opens Secret Manager, for --secret.
	secrets func(context.Context) (secretWriter, error)
}

// secretWriter adds a version to a Secret Manager secret (*secrets.Client).
type secretWriter interface {
	AddVersion(ctx context.Context, secret string, data []byte) (string, error)
}

// admin is one run's stores and actor.
type admin struct {
	cmdEnv
	actor    string
	keys     *postgres.APIKeys
	policies *postgres.Policies
	audit    *postgres.AuditLog
	secrets  secretWriter // with --secret
}

// secretName is a Secret Manager secret's resource name.
var secretName = regexp.MustCompile(`^projects/[a-z0-9-]+/secrets/[A-Za-z0-9_-]+$`)

func run(ctx context.Context, args []string, env cmdEnv) error {
	var cmd string
	var rest []string
	switch {
	case len(args) >= 1 && args[0] == "bootstrap":
		cmd, rest = args[0], args[1:]
	case len(args) >= 2:
		cmd, rest = args[0]+" "+args[1], args[2:]
	default:
		return fmt.Errorf("%w: a command is required", errUsage)
	}
	flags := flag.NewFlagSet("admin "+cmd, flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	principal := flags.String("principal", "", "the principal")
	id := flags.String("id", "", "an API key id, k_ and 16 hex digits")
	file := flags.String("file", "", "a policy file, - for stdin")
	limit := flags.Int("limit", 50, "how many rows")
	secret := flags.String("secret", "", "a Secret Manager secret, projects/PROJECT/secrets/SECRET")
	if err := flags.Parse(rest); err != nil {
		return fmt.Errorf("%w: %s: %v", errUsage, cmd, err)
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected argument(s) %q", errUsage, cmd, flags.Args())
	}
	var do func(context.Context, *admin) error
	switch cmd {
	case "apikey create":
		do = func(ctx context.Context, a *admin) error { _, err := a.createKey(ctx, *principal, *secret); return err }
	case "bootstrap":
		do = func(ctx context.Context, a *admin) error { return a.bootstrap(ctx, *principal, *secret) }
	case "apikey revoke":
		do = func(ctx context.Context, a *admin) error { return a.revokeKey(ctx, *id) }
	case "apikey list":
		do = func(ctx context.Context, a *admin) error { return a.listKeys(ctx, *principal) }
	case "policy put":
		do = func(ctx context.Context, a *admin) error { return a.putPolicy(ctx, *file) }
	case "policy show":
		do = func(ctx context.Context, a *admin) error { return a.showPolicy(ctx, *principal) }
	case "audit list":
		do = func(ctx context.Context, a *admin) error { return a.listAudit(ctx, *principal, *limit) }
	default:
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
	// Check what can be checked before connecting.
	switch {
	case (cmd == "apikey create" || cmd == "policy show" || cmd == "bootstrap") && strings.TrimSpace(*principal) == "":
		return fmt.Errorf("%w: %s needs --principal", errUsage, cmd)
	case cmd == "bootstrap" && *secret == "":
		return fmt.Errorf("%w: %s needs --secret: the key is written there, never printed", errUsage, cmd)
	case *secret != "" && cmd != "apikey create" && cmd != "bootstrap":
		return fmt.Errorf("%w: %s takes no --secret", errUsage, cmd)
	case *secret != "" && !secretName.MatchString(*secret):
		return fmt.Errorf("%w: --secret must be projects/PROJECT/secrets/SECRET", errUsage)
	case cmd == "apikey revoke" && *id == "":
		return fmt.Errorf("%w: %s needs --id", errUsage, cmd)
	case cmd == "policy put" && *file == "":
		return fmt.Errorf("%w: %s needs --file", errUsage, cmd)
	}

	// Policies, API keys and the audit log live in the one database, or in
	// the home shard: the first of TXFENCE_DATABASES.
	dbs, err := config.LoadDatabases(func(k string) (string, bool) { v := env.getenv(k); return v, v != "" })
	if err != nil {
		return err
	}
	dbcfg := dbs[0].Database
	dbcfg.MaxConns = 2
	db, err := postgres.Open(ctx, dbcfg)
	if err != nil {
		return err
	}
	defer db.Close()
	a := &admin{cmdEnv: env, actor: "cli"}
	if user := env.getenv("USER"); user != "" {
		a.actor = "cli:" + user
	}
	if *secret != "" {
		if env.secrets == nil {
			return errors.New("secret manager is not available to this command")
		}
		if a.secrets, err = env.secrets(ctx); err != nil {
			return err
		}
	}
	if a.keys, err = postgres.NewAPIKeys(db.Pool); err != nil {
		return err
	}
	if a.policies, err = postgres.NewPolicies(db.Pool); err != nil {
		return err
	}
	if a.audit, err = postgres.NewAuditLog(db.Pool); err != nil {
		return err
	}
	return do(ctx, a)
}

// createKey creates an API key for principal and prints it, or, with
// secret, writes it as a new version of that secret and prints where. It
// returns the key's id.
func (a *admin) createKey(ctx context.Context, principal, secret string) (string, error) {
	principal = strings.TrimSpace(principal)
	if len(principal) > 320 {
		return "", fmt.Errorf("%w: --principal is at most 320 characters", errUsage)
	}
	var key, id string
	for attempt := 0; ; attempt++ {
		var hash []byte
		key, id, hash = auth.NewAPIKey()
		err := a.keys.CreateAPIKey(ctx, txm.APIKey{ID: id, Principal: principal, Hash: hash, CreatedBy: a.actor})
		if err == nil {
			break
		}
		if !errors.Is(err, txm.ErrConflict) || attempt == 2 {
			return "", err
		}
		// A random id already taken: draw again.
	}
	if secret == "" {
		fmt.Fprintln(a.stdout, key)
		fmt.Fprintf(a.stderr, "created API key %s for %s: it is shown only this once; keep it in a secret manager\n", id, principal)
	} else {
		version, err := a.secrets.AddVersion(ctx, secret, []byte(key))
		if err != nil {
			// Nobody has the key: it must not stay valid.
			if rerr := a.keys.RevokeAPIKey(ctx, id, a.actor); rerr != nil {
				return "", fmt.Errorf("%w (and revoking the key %s it was for failed: %v; revoke it)", err, id, rerr)
			}
			return "", fmt.Errorf("%w; the key %s it was for is revoked", err, id)
		}
		fmt.Fprintf(a.stdout, "created API key %s for %s in %s\n", id, principal, version)
		fmt.Fprintf(a.stderr, "read it with: gcloud secrets versions access %s --secret=%s\n", version[strings.LastIndex(version, "/")+1:], secret[strings.LastIndex(secret, "/")+1:])
	}
	if _, err := a.policies.Policy(ctx, principal); errors.Is(err, txm.ErrNotFound) {
		fmt.Fprintf(a.stderr, "note: %s has no policy yet: the key may do nothing until `admin policy put`\n", principal)
	}
	return id, nil
}

// bootstrap makes the first admin: principal gets the admin role on every
// signer, unless it has a policy already, and an API key written to
// secret. A principal that has a key already is left as it is, so that
// running the job again changes nothing.
func (a *admin) bootstrap(ctx context.Context, principal, secret string) error {
	principal = strings.TrimSpace(principal)
	keys, err := a.keys.ListAPIKeys(ctx, principal)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.RevokedAt == nil {
			fmt.Fprintf(a.stdout, "%s has API key %s already: nothing to do (apikey create --secret makes another)\n", principal, k.ID)
			return nil
		}
	}
	if _, err := a.policies.Policy(ctx, principal); errors.Is(err, txm.ErrNotFound) {
		p := txm.Policy{Principal: principal, Roles: []txm.Role{txm.RoleAdmin}, AllSigners: true}
		if err := p.Validate(); err != nil {
			return err
		}
		stored, err := a.policies.PutPolicy(ctx, p, a.actor)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%s is admin of every signer (policy version %d)\n", stored.Principal, stored.Version)
	} else if err != nil {
		return err
	}
	_, err = a.createKey(ctx, principal, secret)
	return err
}

func (a *admin) revokeKey(ctx context.Context, id string) error {
	if !auth.ValidAPIKeyID(id) {
		if strings.HasPrefix(id, auth.APIKeyPrefix) {
			return fmt.Errorf("%w: --id takes the key's id (k_ and 16 hex digits), not the key", errUsage)
		}
		return fmt.Errorf("%w: --id must be k_ and 16 lowercase hex digits", errUsage)
	}
	if err := a.keys.RevokeAPIKey(ctx, id, a.actor); err != nil {
		if errors.Is(err, txm.ErrNotFound) {
			return fmt.Errorf("no API key %s", id)
		}
		return err
	}
	fmt.Fprintf(a.stdout, "revoked %s\n", id)
	return nil
}

func (a *admin) listKeys(ctx context.Context, principal string) error {
	keys, err := a.keys.ListAPIKeys(ctx, strings.TrimSpace(principal))
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tPRINCIPAL\tCREATED\tCREATED BY\tREVOKED")
	for _, k := range keys {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = k.RevokedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Principal, k.CreatedAt.UTC().Format(time.RFC3339), k.CreatedBy, revoked)
	}
	return w.Flush()
}

// maxPolicyFile bounds a policy file.
const maxPolicyFile = 1 << 20

func (a *admin) putPolicy(ctx context.Context, file string) error {
	var r io.Reader = a.stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	raw, err := io.ReadAll(io.LimitReader(r, maxPolicyFile+1))
	if err != nil {
		return fmt.Errorf("read %s: %w", file, err)
	}
	if len(raw) > maxPolicyFile {
		return fmt.Errorf("%s is larger than %d bytes", file, maxPolicyFile)
	}
	p, err := decodePolicy(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	stored, err := a.policies.PutPolicy(ctx, p, a.actor)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "policy of %s is now version %d\n", stored.Principal, stored.Version)
	return printJSON(a.stdout, stored)
}

func (a *admin) showPolicy(ctx context.Context, principal string) error {
	p, err := a.policies.Policy(ctx, strings.TrimSpace(principal))
	if errors.Is(err, txm.ErrNotFound) {
		return fmt.Errorf("%s has no policy: it may do nothing", principal)
	}
	if err != nil {
		return err
	}
	return printJSON(a.stdout, p)
}

func (a *admin) listAudit(ctx context.Context, principal string, limit int) error {
	rows, err := a.audit.ListAudit(ctx, strings.TrimSpace(principal), limit)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tAT\tPRINCIPAL\tACTION\tTARGET\tOUTCOME\tDETAIL")
	for _, r := range rows {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.At.UTC().Format(time.RFC3339), r.Principal, r.Action, r.Target, r.Outcome, r.Detail)
	}
	return w.Flush()
}

// policyFields are the fields of txm.Policy's wire form; limitFields those
// of its hourly and daily limits; tokenRuleFields those of one of its token
// rules; windowFields those of one of its windows.
var (
	policyFields = []string{"principal", "version", "roles", "signers", "maxValue", "maxGasLimit", "maxFeePerGas",
		"skipEstimation", "simulation", "hourly", "daily", "allowlist", "tokens", "tokenRecipients", "spenders", "noUnlimitedApprovals",
		"windows", "ratePerSecond", "burst", "maxWaits", "createdAt", "createdBy"}
	limitFields     = []string{"value", "count"}
	tokenRuleFields = []string{"chainId", "token", "maxPerTx", "protected"}
	windowFields    = []string{"scope", "asset", "chainId", "period", "maxAmount", "maxCount"}
)

// approvalFields are the policy's approvals field; approvalRuleFields those
// of one of its rules.
var (
	approvalFields     = []string{"approvals"}
	approvalRuleFields = []string{"asset", "chainId", "above", "required", "approvers", "approverRole", "expiresIn"}
)

// decodePolicy reads one policy in its wire form, refusing unknown fields
// (txm.Policy's own decoding ignores them) and trailing data.
func decodePolicy(raw []byte) (txm.Policy, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return txm.Policy{}, fmt.Errorf("%w: a policy is one JSON object: %v", txm.ErrInvalid, err)
	}
	if err := knownFields("", fields, append(append([]string{}, policyFields...), approvalFields...)); err != nil {
		return txm.Policy{}, err
	}
	for _, name := range []string{"hourly", "daily"} {
		if v, ok := fields[name]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			var limit map[string]json.RawMessage
			if err := json.Unmarshal(v, &limit); err != nil {
				return txm.Policy{}, fmt.Errorf("%w: %s must be an object with value and count", txm.ErrInvalid, name)
			}
			if err := knownFields(name+".", limit, limitFields); err != nil {
				return txm.Policy{}, err
			}
		}
	}
	for _, list := range []struct {
		name   string
		fields []string
	}{{"tokens", tokenRuleFields}, {"windows", windowFields}} {
		v, ok := fields[list.name]
		if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue
		}
		var items []map[string]json.RawMessage
		if err := json.Unmarshal(v, &items); err != nil {
			return txm.Policy{}, fmt.Errorf("%w: %s must be a list of objects with %s", txm.ErrInvalid, list.name, strings.Join(list.fields, ", "))
		}
		for i, item := range items {
			if err := knownFields(fmt.Sprintf("%s[%d].", list.name, i), item, list.fields); err != nil {
				return txm.Policy{}, err
			}
		}
	}
	if v, ok := fields["approvals"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		var rules []map[string]json.RawMessage
		if err := json.Unmarshal(v, &rules); err != nil {
			return txm.Policy{}, fmt.Errorf("%w: approvals must be a list of objects with %s", txm.ErrInvalid,
				strings.Join(approvalRuleFields, ", "))
		}
		for i, rule := range rules {
			if err := knownFields(fmt.Sprintf("approvals[%d].", i), rule, approvalRuleFields); err != nil {
				return txm.Policy{}, err
			}
		}
	}
	var p txm.Policy
	if err := json.Unmarshal(raw, &p); err != nil {
		return txm.Policy{}, err
	}
	return p, nil
}

func knownFields(prefix string, fields map[string]json.RawMessage, known []string) error {
	for name := range fields {
		ok := false
		for _, k := range known {
			ok = ok || name == k
		}
		if !ok {
			return fmt.Errorf("%w: unknown field %q (known: %s)", txm.ErrInvalid, prefix+name, strings.Join(known, ", "))
		}
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
