package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/auth"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/postgres"
	"github.com/txfence/txfence/shared/txm"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// cli runs the command against one database as one user.
type cli struct {
	t       *testing.T
	env     map[string]string
	db      *pgtest.DB
	stdin   string
	secrets *fakeSecrets
}

// fakeSecrets is Secret Manager for --secret: versions by secret, and an
// error to answer with (shared/secrets tests the real client).
type fakeSecrets struct {
	versions map[string][]string
	err      error
}

func (f *fakeSecrets) AddVersion(_ context.Context, secret string, data []byte) (string, error) {
	if f.err != nil {
		return "", f.err
	}
	f.versions[secret] = append(f.versions[secret], string(data))
	return fmt.Sprintf("%s/versions/%d", secret, len(f.versions[secret])), nil
}

func newCLI(t *testing.T) *cli {
	db := pgtest.New(t)
	return &cli{t: t, db: db, env: map[string]string{config.EnvDatabaseURL: db.URL, "USER": "alice"},
		secrets: &fakeSecrets{versions: map[string][]string{}}}
}

func (c *cli) run(args ...string) (stdout, stderr string, err error) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	err = run(context.Background(), args, cmdEnv{getenv: func(k string) string { return c.env[k] }, stdin: strings.NewReader(c.stdin),
		stdout: &out, stderr: &errOut, secrets: func(context.Context) (secretWriter, error) { return c.secrets, nil }})
	return out.String(), errOut.String(), err
}

func (c *cli) ok(args ...string) (stdout, stderr string) {
	c.t.Helper()
	stdout, stderr, err := c.run(args...)
	require.NoError(c.t, err, "admin %v: %s", args, stderr)
	return stdout, stderr
}

func TestIssue11_AuthAdminAPIKeyLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCLI(t)
	keys, err := postgres.NewAPIKeys(c.db.Pool)
	require.NoError(t, err)
	audit, err := postgres.NewAuditLog(c.db.Pool)
	require.NoError(t, err)
	authn, err := auth.New(config.Auth{Methods: []string{"apikey"}}, keys)
	require.NoError(t, err)

	stdout, stderr := c.ok("apikey", "create", "--principal", "partner@example.com")
	key := strings.TrimSpace(stdout)
	id, ok := auth.ParseAPIKey(key)
	require.True(t, ok, "stdout is the key and nothing else: %q", stdout)
	assert.Equal(t, key+"\n", stdout)
	assert.Contains(t, stderr, id)
	assert.Contains(t, stderr, "no policy yet")
	assert.NotContains(t, stderr, key)
	secret := key[len("txfk_"+id+"_"):]
	assert.NotContains(t, stderr, secret)

	// Only the hash is stored.
	stored, err := keys.APIKey(ctx, id)
	require.NoError(t, err)
	sum := sha256.Sum256([]byte(key))
	assert.Equal(t, sum[:], stored.Hash)
	assert.Equal(t, "cli:alice", stored.CreatedBy)

	p, err := authn.Authenticate(ctx, txm.Credential{Bearer: key})
	require.NoError(t, err)
	assert.Equal(t, txm.Principal{ID: "partner@example.com", Via: "apikey"}, p)

	// The listing shows ids and owners, never secrets.
	c.env["USER"] = ""
	other, _ := c.ok("apikey", "create", "--principal", "other@example.com")
	list, _ := c.ok("apikey", "list")
	assert.Contains(t, list, id)
	assert.Contains(t, list, "partner@example.com")
	assert.Contains(t, list, "other@example.com")
	assert.NotContains(t, list, secret)
	assert.NotContains(t, list, strings.TrimSpace(other)[len("txfk_k_0123456789abcdef_"):])
	list, _ = c.ok("apikey", "list", "--principal", "other@example.com")
	assert.NotContains(t, list, "partner@example.com")

	c.env["USER"] = "bob"
	out, _ := c.ok("apikey", "revoke", "--id", id)
	assert.Equal(t, "revoked "+id+"\n", out)
	_, err = authn.Authenticate(ctx, txm.Credential{Bearer: key})
	require.ErrorIs(t, err, txm.ErrUnauthenticated, "a revoked key is 401")
	list, _ = c.ok("apikey", "list", "--principal", "partner@example.com")
	lines := strings.Split(strings.TrimSpace(list), "\n")
	require.Len(t, lines, 2)
	assert.Regexp(t, `^`+id+`\s.*\s\d{4}-\d\d-\d\dT\S+Z$`, lines[1], "the listing shows when the key was revoked")

	_, _, err = c.run("apikey", "revoke", "--id", "k_0000000000000000")
	assert.ErrorContains(t, err, "no API key")
	_, _, err = c.run("apikey", "revoke", "--id", key)
	require.ErrorIs(t, err, errUsage)
	assert.NotContains(t, err.Error(), key, "a pasted key is not echoed")

	rows, err := audit.ListAudit(ctx, "", 10)
	require.NoError(t, err)
	var got []string
	for _, r := range rows {
		got = append(got, r.Principal+" "+r.Action)
		assert.NotContains(t, r.Detail+r.Target, secret)
	}
	assert.Equal(t, []string{"cli:bob apikey.revoke", "cli apikey.create", "cli:alice apikey.create"}, got)
	auditOut, _ := c.ok("audit", "list", "--principal", "cli:bob")
	assert.Contains(t, auditOut, "apikey.revoke")
	assert.NotContains(t, auditOut, "apikey.create")
}

func TestAdminPolicyPutAndShow(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		return path
	}

	_, _, err := c.run("policy", "show", "--principal", "svc@example.com")
	assert.ErrorContains(t, err, "no policy")

	good := write("good.json", `{"principal": "svc@example.com", "roles": ["sender"],
  "signers": ["0x0000000000000000000000000000000000000001"], "maxValue": "1000",
  "hourly": {"value": "5000", "count": 10}, "daily": {"count": 100}, "ratePerSecond": 2}`)
	stdout, stderr := c.ok("policy", "put", "--file", good)
	assert.Contains(t, stderr, "version 1")
	var put txm.Policy
	require.NoError(t, json.Unmarshal([]byte(stdout), &put))
	assert.Equal(t, 1, put.Version)
	assert.Equal(t, "cli:alice", put.CreatedBy)

	shown, _ := c.ok("policy", "show", "--principal", "svc@example.com")
	var p txm.Policy
	require.NoError(t, json.Unmarshal([]byte(shown), &p))
	assert.Equal(t, 1, p.Version)
	assert.Equal(t, "1000", p.MaxValue.String())
	assert.Equal(t, 10, p.Hourly.Count)

	c.stdin = `{"principal": "svc@example.com", "roles": ["reader"], "signers": ["*"]}`
	_, stderr = c.ok("policy", "put", "--file", "-")
	assert.Contains(t, stderr, "version 2")
	shown, _ = c.ok("policy", "show", "--principal", "svc@example.com")
	require.NoError(t, json.Unmarshal([]byte(shown), &p))
	assert.Equal(t, 2, p.Version)
	assert.True(t, p.AllSigners)

	// Bad files write nothing.
	for name, body := range map[string]string{
		"unknown.json":        `{"principal": "svc@example.com", "roles": ["sender"], "maxvalue": "1"}`,
		"unknown_limit.json":  `{"principal": "svc@example.com", "roles": ["sender"], "hourly": {"values": "1"}}`,
		"unknown_window.json": `{"principal": "svc@example.com", "roles": ["sender"], "windows": [{"scope": "signer", "asset": "native", "period": "1h", "max": "1"}]}`,
		"window.json":         `{"principal": "svc@example.com", "roles": ["sender"], "windows": [{"scope": "signer", "asset": "native", "period": "1w", "maxCount": 1}]}`,
		"role.json":           `{"principal": "svc@example.com", "roles": ["root"]}`,
		"noprincipal.json":    `{"roles": ["sender"]}`,
		"wei.json":            `{"principal": "svc@example.com", "roles": ["sender"], "maxValue": "-1"}`,
		"signer.json":         `{"principal": "svc@example.com", "roles": ["sender"], "signers": ["0x12"]}`,
		"array.json":          `[{"principal": "svc@example.com", "roles": ["sender"]}]`,
		"trailing.json":       `{"principal": "svc@example.com", "roles": ["sender"]} {}`,
	} {
		_, _, err := c.run("policy", "put", "--file", write(name, body))
		assert.ErrorIs(t, err, txm.ErrInvalid, name)
	}
	shown, _ = c.ok("policy", "show", "--principal", "svc@example.com")
	require.NoError(t, json.Unmarshal([]byte(shown), &p))
	assert.Equal(t, 2, p.Version)
}

func TestAdminUsage(t *testing.T) {
	t.Parallel()
	env := cmdEnv{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	for _, args := range [][]string{
		{}, {"apikey"}, {"apikey", "rotate"}, {"apikey", "create"}, {"apikey", "create", "--principal", " "},
		{"apikey", "revoke"}, {"policy", "put"}, {"policy", "show"}, {"apikey", "list", "--nope"}, {"apikey", "list", "extra"},
	} {
		err := run(context.Background(), args, env)
		assert.ErrorIs(t, err, errUsage, "%v", args)
	}
	err := run(context.Background(), []string{"apikey", "list"}, env)
	assert.ErrorContains(t, err, config.EnvDatabaseURL)
}

// Every field of the wire form is known to the strict decoder.
func TestPolicyFieldsCoverTheWireForm(t *testing.T) {
	t.Parallel()
	var full txm.Policy
	require.NoError(t, json.Unmarshal([]byte(`{"principal": "p", "version": 3, "roles": ["admin"], "signers": ["*", "0x0000000000000000000000000000000000000001"],
  "maxValue": "1", "maxGasLimit": 21000, "maxFeePerGas": "1", "skipEstimation": true, "simulation": "advisory",
  "hourly": {"value": "1", "count": 1}, "daily": {"value": "1", "count": 1},
  "allowlist": ["0x0000000000000000000000000000000000000002"],
  "tokens": [{"chainId": 1, "token": "0x0000000000000000000000000000000000000003", "maxPerTx": "1"}],
  "tokenRecipients": ["0x0000000000000000000000000000000000000004"], "spenders": [], "noUnlimitedApprovals": true,
  "windows": [{"scope": "principal", "asset": "0x0000000000000000000000000000000000000003", "chainId": 1, "period": "1h", "maxAmount": "1", "maxCount": 1}],
  "ratePerSecond": 1, "burst": 1, "maxWaits": 1,
  "createdAt": "2024-01-01T00:00:00Z", "createdBy": "x",
  "approvals": [{"asset": "0x0000000000000000000000000000000000000003", "chainId": 1, "above": "5", "required": 1,
    "approvers": ["a"], "expiresIn": "1h0m0s"}]}`), &full))
	raw, err := json.Marshal(full)
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(raw, &fields))
	assert.Len(t, fields, len(policyFields)+len(approvalFields), "a wire-form field is missing from policyFields or approvalFields")
	rules, _ := fields["approvals"].([]any)
	require.Len(t, rules, 1)
	assert.Len(t, rules[0], len(approvalRuleFields)-1, "an approval rule's field is missing from approvalRuleFields (approverRole is the other form)")
	_, err = decodePolicy(raw)
	require.NoError(t, err)
}

// TestIssue45_FirstAdminCredential: the admin job's bootstrap makes the
// first admin, an API key for a principal with the admin role on every
// signer, and writes the key to Secret Manager, never to its output (which
// Cloud Logging keeps). Run again, it changes nothing; a key whose secret
// could not be written is revoked at once.
func TestIssue45_FirstAdminCredential(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCLI(t)
	c.env["USER"] = "txfence-admin-job"
	const secret = "projects/p/secrets/txfence-first-admin-key"
	const principal = "txfence-operator@p.iam.gserviceaccount.com"

	stdout, stderr := c.ok("bootstrap", "--principal", principal, "--secret", secret)
	require.Len(t, c.secrets.versions[secret], 1, "one version written")
	key := c.secrets.versions[secret][0]
	id, ok := auth.ParseAPIKey(key)
	require.True(t, ok, "the secret holds an API key")
	assert.NotContains(t, stdout+stderr, key[len("txfk_"+id+"_"):], "the key is never printed")
	assert.Contains(t, stdout, id)
	assert.Contains(t, stdout, secret+"/versions/1")

	keys, err := postgres.NewAPIKeys(c.db.Pool)
	require.NoError(t, err)
	authn, err := auth.New(config.Auth{Methods: []string{"apikey"}}, keys)
	require.NoError(t, err)
	p, err := authn.Authenticate(ctx, txm.Credential{Bearer: key})
	require.NoError(t, err)
	assert.Equal(t, principal, p.ID)
	policies, err := postgres.NewPolicies(c.db.Pool)
	require.NoError(t, err)
	pol, err := policies.Policy(ctx, principal)
	require.NoError(t, err)
	assert.True(t, pol.Has(txm.RoleAdmin) && pol.AllSigners, "admin of every signer: %+v", pol)
	assert.Equal(t, "cli:txfence-admin-job", pol.CreatedBy)

	stdout, _ = c.ok("bootstrap", "--principal", principal, "--secret", secret)
	assert.Contains(t, stdout, "nothing to do")
	assert.Len(t, c.secrets.versions[secret], 1, "a second run writes nothing")

	// A secret that cannot be written: the key made for it is revoked.
	other := "ops@example.com"
	c.secrets.err = errors.New("add a version to " + secret + ": permission denied on the secret")
	stdout, stderr, err = c.run("bootstrap", "--principal", other, "--secret", secret)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is revoked")
	assert.NotContains(t, stdout+stderr, "txfk_")
	list, err := keys.ListAPIKeys(ctx, other)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.NotNil(t, list[0].RevokedAt, "the key nobody holds is refused")

	// The usage errors say what is missing, before any database work.
	_, _, err = c.run("bootstrap", "--principal", principal)
	assert.ErrorIs(t, err, errUsage)
	_, _, err = c.run("bootstrap", "--principal", principal, "--secret", "txfence-first-admin-key")
	assert.ErrorIs(t, err, errUsage)
	_, _, err = c.run("apikey", "list", "--secret", secret)
	assert.ErrorIs(t, err, errUsage)

	// apikey create --secret: another key, to the secret, not to stdout.
	c.secrets.err = nil
	stdout, stderr = c.ok("apikey", "create", "--principal", principal, "--secret", secret)
	require.Len(t, c.secrets.versions[secret], 2)
	second := c.secrets.versions[secret][1]
	assert.NotContains(t, stdout+stderr, second)
}

// TestIssue46_PolicyDoc: docs/policies.md documents every field of a policy
// file and every rule a refusal names, and its examples are policies the
// admin command writes as they stand; the README points to it.
func TestIssue46_PolicyDoc(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "docs", "policies.md"))
	require.NoError(t, err)
	doc := string(raw)
	for _, f := range policyFields {
		assert.Regexp(t, "(?m)^\\| [^|]*`"+f+"`", doc, "the fields table names %s", f)
	}
	for _, f := range limitFields {
		assert.Contains(t, doc, `"`+f+`"`, "hourly and daily show %s", f)
	}
	for _, f := range tokenRuleFields {
		assert.Contains(t, doc, `"`+f+`"`, "the token rules show %s", f)
	}
	for _, f := range windowFields {
		assert.Contains(t, doc, `"`+f+`"`, "the windows show %s", f)
	}
	for _, f := range approvalFields {
		assert.Regexp(t, "(?m)^\\| [^|]*`"+f+"`", doc, "the fields table names %s", f)
	}
	for _, f := range approvalRuleFields {
		assert.Contains(t, doc, `"`+f+`"`, "the approval rules show %s", f)
	}
	for _, rule := range []string{txm.RuleRole, txm.RuleSigner, txm.RuleMaxValue, txm.RuleMaxGasLimit, txm.RuleMaxFee,
		txm.RuleAllowlist, txm.RuleHourlyValue, txm.RuleHourlyCount, txm.RuleDailyValue, txm.RuleDailyCount, txm.RuleWindowAmount, txm.RuleWindowCount,
		txm.RuleTokenMaxPerTx, txm.RuleTokenProtected, txm.RuleTokenRecipients, txm.RuleSpenders, txm.RuleUnlimitedApprovals, txm.RuleEffectsUnknown} {
		assert.Contains(t, doc, "`"+rule+"`", "the refusal rules name %s", rule)
	}
	for _, r := range txm.Roles {
		assert.Regexp(t, "(?m)^\\| `"+string(r)+"` \\|", doc, "the roles table says what %s may do", r)
	}

	examples := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(doc, -1)
	require.GreaterOrEqual(t, len(examples), 2)
	c := newCLI(t)
	for _, ex := range examples {
		c.stdin = ex[1]
		stdout, _ := c.ok("policy", "put", "--file", "-")
		var put, want txm.Policy
		require.NoError(t, json.Unmarshal([]byte(stdout), &put))
		require.NoError(t, json.Unmarshal([]byte(ex[1]), &want))
		assert.Equal(t, want.Principal, put.Principal)
		assert.Equal(t, 1, put.Version)
	}

	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	assert.Contains(t, string(readme), "(docs/policies.md)", "the README links the policy format")
}

// TestIssue47_PolicyFileEffectRules: a policy file carries the rules on a
// transaction's effects; a misspelt member of a token rule is refused as a
// misspelt policy field is, and a bad rule writes nothing.
func TestIssue47_PolicyFileEffectRules(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	const principal = "treasury@example.com"
	c.stdin = `{"principal": "` + principal + `", "roles": ["sender"], "signers": ["0x0000000000000000000000000000000000000001"],
  "tokens": [{"chainId": 1, "token": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "maxPerTx": "1000000000"},
             {"chainId": 1, "token": "0x00000000000000000000000000000000000020f0", "protected": true}],
  "tokenRecipients": ["0x00000000000000000000000000000000000000a1"], "spenders": [], "noUnlimitedApprovals": true}`
	c.ok("policy", "put", "--file", "-")
	shown, _ := c.ok("policy", "show", "--principal", principal)
	var p txm.Policy
	require.NoError(t, json.Unmarshal([]byte(shown), &p))
	require.Len(t, p.Tokens, 2)
	assert.Equal(t, "1000000000", p.Tokens[0].MaxPerTx.String())
	assert.True(t, p.Tokens[1].Protected)
	assert.Len(t, p.TokenRecipients, 1)
	assert.NotNil(t, p.Spenders, "[] is kept: no spender")
	assert.True(t, p.NoUnlimitedApprovals)

	for name, body := range map[string]string{
		"misspelt member": `{"principal": "` + principal + `", "roles": ["sender"],
  "tokens": [{"chainId": 1, "token": "0x00000000000000000000000000000000000020c0", "maxPerTX": "1"}]}`,
		"not a list": `{"principal": "` + principal + `", "roles": ["sender"], "tokens": {"chainId": 1}}`,
		"duplicate": `{"principal": "` + principal + `", "roles": ["sender"],
  "tokens": [{"chainId": 1, "token": "0x00000000000000000000000000000000000020c0", "maxPerTx": "1"},
             {"chainId": 1, "token": "0x00000000000000000000000000000000000020c0", "protected": true}]}`,
		"negative": `{"principal": "` + principal + `", "roles": ["sender"],
  "tokens": [{"chainId": 1, "token": "0x00000000000000000000000000000000000020c0", "maxPerTx": "-5"}]}`,
		"bad spender": `{"principal": "` + principal + `", "roles": ["sender"], "spenders": ["0x12"]}`,
	} {
		c.stdin = body
		_, _, err := c.run("policy", "put", "--file", "-")
		assert.ErrorIs(t, err, txm.ErrInvalid, name)
	}
	shown, _ = c.ok("policy", "show", "--principal", principal)
	require.NoError(t, json.Unmarshal([]byte(shown), &p))
	assert.Equal(t, 1, p.Version, "a refused file writes nothing")
}
