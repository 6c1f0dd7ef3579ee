package terraform

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// validateScript is make tf-validate's script, relative to this package.
const validateScript = "tools/tf-validate.sh"

// toolsReady skips the test when tf-validate's binaries are not built (make
// tf-tools builds them; make test and CI do so first).
func toolsReady(t *testing.T) {
	t.Helper()
	if err := exec.Command("bash", validateScript, "--tools-ready").Run(); err != nil {
		t.Skip("terraform validation tools not built (OpenTofu and the google provider, cached in .tools/terraform): run make tf-tools")
	}
}

// copySchemas copies the repository's schemas/ (the module reads the
// completion topic's schema from ../schemas) into root/schemas, beside the
// copy of the module at root/terraform.
func copySchemas(t *testing.T, root string) {
	t.Helper()
	files, err := filepath.Glob("../schemas/*")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "schemas"), 0o755))
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(root, "schemas", filepath.Base(f)), b, 0o644))
	}
}

// copyModule copies the module's .tf files and the templates they render
// into a fresh directory (and schemas/ beside it).
func copyModule(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	copySchemas(t, root)
	dir := filepath.Join(root, "terraform")
	files, err := filepath.Glob("*.tf")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	templates, err := filepath.Glob("templates/*")
	require.NoError(t, err)
	files = append(files, templates...)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "templates"), 0o755))
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	return dir
}

// validate runs the script on dir and returns its combined output.
func validate(t *testing.T, dir string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", validateScript, dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestIssue13_TfValidateCatchesBrokenAttribute: make tf-validate's script
// checks against the provider's real schema. The module, copied as it is,
// validates; the same copy with one resource attribute misspelt (Cloud SQL's
// tier) fails, naming the attribute.
func TestIssue13_TfValidateCatchesBrokenAttribute(t *testing.T) {
	toolsReady(t)
	dir := copyModule(t)

	out, err := validate(t, dir)
	require.NoError(t, err, "the module as it is validates:\n%s", out)

	sql := filepath.Join(dir, "sql.tf")
	b, err := os.ReadFile(sql)
	require.NoError(t, err)
	broken := strings.Replace(string(b), "    tier              = each.value.tier", "    tierr             = each.value.tier", 1)
	require.NotEqual(t, string(b), broken, "the attribute to break is in sql.tf")
	require.NoError(t, os.WriteFile(sql, []byte(broken), 0o644))

	out, err = validate(t, dir)
	require.Error(t, err, "a misspelt attribute must fail validation:\n%s", out)
	assert.Contains(t, out, "tierr", "the error names the attribute")
	assert.Contains(t, out, "Unsupported argument")
}

// TestIssue13_Environments: the dev and prod roots use the shared module,
// keep their state in GCS (configured at init), and are sized as their
// purpose says.
func TestIssue13_Environments(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return string(b)
	}
	setting := func(t *testing.T, src, name, want string) {
		t.Helper()
		re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s*=\s*(.+?)\s*$`)
		m := re.FindStringSubmatch(src)
		if assert.NotNil(t, m, "%s is set", name) {
			assert.Equal(t, want, m[1], name)
		}
	}
	for _, env := range []string{"dev", "prod"} {
		t.Run(env, func(t *testing.T) {
			dir := filepath.Join("environments", env)
			main := read(filepath.Join(dir, "main.tf"))
			assert.Contains(t, main, `source = "../.."`, "uses the shared module")
			assert.Regexp(t, `backend "gcs" \{\}`, main, "a GCS backend, bucket and prefix given at init")
			assert.FileExists(t, filepath.Join(dir, "variables.tf"))
			assert.FileExists(t, filepath.Join(dir, "terraform.tfvars.example"))
			assert.FileExists(t, filepath.Join(dir, "backend.hcl.example"))
		})
	}
	dev := read("environments/dev/main.tf")
	setting(t, dev, "db_tier", `"db-f1-micro"`)
	setting(t, dev, "db_availability_type", `"ZONAL"`)
	setting(t, dev, "min_instances", `{ api = 0 }`)

	prod := read("environments/prod/main.tf")
	setting(t, prod, "db_availability_type", `"REGIONAL"`)
	setting(t, prod, "db_point_in_time_recovery", "true")
	setting(t, prod, "db_deletion_protection", "true")
	setting(t, prod, "min_instances", "{ api = var.api_min_instances }")
	vars := read("environments/prod/variables.tf")
	invokers := regexp.MustCompile(`(?s)variable "api_invoker_members" \{(.*?)\n\}`).FindStringSubmatch(vars)
	require.NotNil(t, invokers)
	assert.NotRegexp(t, `(?m)^\s*default\s*=`, invokers[1], "prod leaves the API's invokers to the operator")
	minAPI := regexp.MustCompile(`(?s)variable "api_min_instances" \{.*?default\s*=\s*([0-9]+)`).FindStringSubmatch(vars)
	require.NotNil(t, minAPI)
	assert.NotEqual(t, "0", minAPI[1], "prod keeps API instances warm")
}

// slug is GitHub's anchor for a Markdown heading.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestIssue13_RunbookLinks: every alert policy carries documentation that
// links to a section of docs/runbook.md, and every such link points at a
// heading that exists there (so does every in-page link of the runbook).
func TestIssue13_RunbookLinks(t *testing.T) {
	runbook, err := os.ReadFile("../docs/runbook.md")
	require.NoError(t, err)
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} (.+)$`).FindAllStringSubmatch(string(runbook), -1) {
		anchors[slug(m[1])] = true
	}

	src, err := os.ReadFile("monitoring.tf")
	require.NoError(t, err)
	mon := string(src)

	// local.runbook: alert key => "${var.runbook_url}#anchor".
	block := regexp.MustCompile(`(?s)\n  runbook = \{\n(.*?)\n  \}`).FindStringSubmatch(mon)
	require.NotNil(t, block, "monitoring.tf defines local.runbook")
	links := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+)\s*=\s*"\$\{var\.runbook_url\}#([a-z0-9-]+)"\s*$`).FindAllStringSubmatch(block[1], -1) {
		links[m[1]] = m[2]
	}
	require.NotEmpty(t, links)

	// Each alert policy resource, up to the next top-level block.
	policies := regexp.MustCompile(`(?ms)^resource "google_monitoring_alert_policy" "(\w+)" \{\n(.*?)^\}`).FindAllStringSubmatch(mon, -1)
	require.GreaterOrEqual(t, len(policies), 8, "fenced writes, pending age, stuck, dead letters, API 5xx, SQL CPU, SQL connections, lease take-overs")
	used := map[string]bool{}
	for _, p := range policies {
		name, body := p[1], p[2]
		t.Run(name, func(t *testing.T) {
			assert.Contains(t, body, "documentation {", "has documentation")
			assert.Contains(t, body, "notification_channels = var.notification_channels")
			refs := regexp.MustCompile(`local\.runbook\.(\w+)`).FindAllStringSubmatch(body, -1)
			require.NotEmpty(t, refs, "links to the runbook")
			keys := map[string]bool{}
			for _, r := range refs {
				keys[r[1]] = true
			}
			assert.Len(t, keys, 1, "one runbook section per alert")
			for k := range keys {
				used[k] = true
				anchor, ok := links[k]
				if assert.True(t, ok, "local.runbook.%s is defined", k) {
					assert.True(t, anchors[anchor], "docs/runbook.md has a heading for #%s", anchor)
				}
			}
			assert.Regexp(t, `url\s*=\s*local\.runbook\.\w+`, body, "a documentation link, not only text")
		})
	}
	for k := range links {
		assert.True(t, used[k], "local.runbook.%s belongs to an alert", k)
	}

	for _, m := range regexp.MustCompile(`\]\(#([a-z0-9-]+)\)`).FindAllStringSubmatch(string(runbook), -1) {
		assert.True(t, anchors[m[1]], "runbook link #%s has a heading", m[1])
	}
}

// cloudBuild is the part of a Cloud Build configuration the test reads.
type cloudBuild struct {
	Substitutions map[string]string `yaml:"substitutions"`
	Steps         []struct {
		ID         string   `yaml:"id"`
		Name       string   `yaml:"name"`
		Entrypoint string   `yaml:"entrypoint"`
		Args       []string `yaml:"args"`
		Env        []string `yaml:"env"`
		Dir        string   `yaml:"dir"`
		WaitFor    []string `yaml:"waitFor"`
	} `yaml:"steps"`
	Images  []string       `yaml:"images"`
	Timeout string         `yaml:"timeout"`
	Options map[string]any `yaml:"options"`
}

// builtinSubstitutions are the ones Cloud Build sets itself.
var builtinSubstitutions = map[string]bool{
	"PROJECT_ID": true, "PROJECT_NUMBER": true, "BUILD_ID": true, "LOCATION": true, "TRIGGER_NAME": true,
	"COMMIT_SHA": true, "SHORT_SHA": true, "REVISION_ID": true, "REPO_NAME": true, "REPO_FULL_NAME": true,
	"BRANCH_NAME": true, "TAG_NAME": true, "REF_NAME": true, "TRIGGER_BUILD_CONFIG_PATH": true,
	"SERVICE_ACCOUNT_EMAIL": true, "SERVICE_ACCOUNT": true,
}

// TestIssue13_CloudBuild: cloudbuild.yaml runs the make targets CI runs, every
// step names a pinned image, every substitution it uses is declared (or one
// Cloud Build sets), and the deploy step waits for the migration.
func TestIssue13_CloudBuild(t *testing.T) {
	raw, err := os.ReadFile("../cloudbuild.yaml")
	require.NoError(t, err)
	var cb cloudBuild
	require.NoError(t, yaml.Unmarshal(raw, &cb))
	require.NotEmpty(t, cb.Steps)

	// Images: every step names one of the declared builders: Google's
	// builders (gcr.io/cloud-builders/*, the Cloud SDK image) or the Go
	// image of go.mod's Go version; never an explicit :latest.
	goMod, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(goMod)
	require.NotNil(t, goVersion)
	ids := map[string]int{}
	for i, s := range cb.Steps {
		require.NotEmpty(t, s.ID, "step %d has an id", i)
		_, dup := ids[s.ID]
		require.False(t, dup, "step id %s is unique", s.ID)
		ids[s.ID] = i
		assert.NotEmpty(t, s.Name, "step %s names its image", s.ID)
		name, tag, _ := strings.Cut(s.Name, ":")
		assert.NotEqual(t, "latest", tag, "step %s: image %s", s.ID, s.Name)
		switch {
		case name == "golang":
			assert.True(t, strings.HasPrefix(tag, string(goVersion[1])), "step %s: golang:%s matches go.mod's go %s", s.ID, tag, goVersion[1])
		case strings.HasPrefix(name, "gcr.io/cloud-builders/"), strings.HasPrefix(name, "gcr.io/google.com/cloudsdktool/"):
		default:
			t.Errorf("step %s: image %s is not a declared builder (golang, gcr.io/cloud-builders/*, gcr.io/google.com/cloudsdktool/*)", s.ID, s.Name)
		}
	}

	// Substitutions: ${_X} and $_X must be declared; built-ins are known.
	// $$ is an escaped $ for the shell.
	use := regexp.MustCompile(`\$(\$|\{([A-Z_][A-Z0-9_]*)\}|([A-Z_][A-Z0-9_]*))`)
	seen := map[string]bool{}
	for _, m := range use.FindAllStringSubmatch(string(raw), -1) {
		if m[1] == "$" {
			continue
		}
		v := m[2] + m[3]
		seen[v] = true
		if strings.HasPrefix(v, "_") {
			_, ok := cb.Substitutions[v]
			assert.True(t, ok, "substitution %s is declared", v)
		} else {
			assert.True(t, builtinSubstitutions[v], "%s is a Cloud Build substitution", v)
		}
	}
	for k := range cb.Substitutions {
		assert.True(t, strings.HasPrefix(k, "_"), "user substitution %s starts with _", k)
		assert.True(t, seen[k], "declared substitution %s is used", k)
	}

	// Ordering: a step without waitFor waits for every step before it; "-"
	// means it starts at once.
	deps := func(i int) []string {
		s := cb.Steps[i]
		if s.WaitFor == nil {
			var prev []string
			for _, p := range cb.Steps[:i] {
				prev = append(prev, p.ID)
			}
			return prev
		}
		var out []string
		for _, w := range s.WaitFor {
			if w != "-" {
				_, ok := ids[w]
				assert.True(t, ok, "step %s waits for a step that exists: %s", s.ID, w)
				out = append(out, w)
			}
		}
		return out
	}
	var after func(id string, seen map[string]bool) map[string]bool
	after = func(id string, seen map[string]bool) map[string]bool {
		for _, d := range deps(ids[id]) {
			if !seen[d] {
				seen[d] = true
				after(d, seen)
			}
		}
		return seen
	}
	for _, need := range []string{"deploy", "migrate", "push"} {
		require.Contains(t, ids, need, "a %s step", need)
	}
	deployAfter := after("deploy", map[string]bool{})
	assert.True(t, deployAfter["migrate"], "deploy waits for migrate")
	assert.True(t, after("migrate", map[string]bool{})["push"], "migrate runs the pushed image")

	// The same make targets as CI, every one of them before the image is
	// pushed (so nothing is migrated or deployed from a tree that fails).
	ci, err := os.ReadFile("../.ci/run")
	require.NoError(t, err)
	var targets []string
	for _, m := range regexp.MustCompile(`(?m)^\s*make\s+([a-z][a-z0-9 -]*?)\s*$`).FindAllStringSubmatch(string(ci), -1) {
		targets = append(targets, strings.Fields(m[1])...)
	}
	require.NotEmpty(t, targets, ".ci/run runs make targets")
	pushAfter := after("push", map[string]bool{})
	made := map[string]bool{}
	for id, i := range ids {
		for _, a := range cb.Steps[i].Args {
			for _, m := range regexp.MustCompile(`(?m)\bmake\s+([a-z][a-z0-9 -]*)`).FindAllStringSubmatch(a, -1) {
				for _, target := range strings.Fields(m[1]) {
					made[target] = true
					assert.True(t, pushAfter[id], "make %s (step %s) runs before the image is pushed", target, id)
				}
			}
		}
	}
	sort.Strings(targets)
	for _, target := range targets {
		assert.True(t, made[target], "cloudbuild.yaml runs make %s, as CI does", target)
	}
	assert.True(t, made["tf-validate"], "cloudbuild.yaml validates the terraform")

	// The image it builds is the one it pushes, migrates with and deploys.
	require.Len(t, cb.Images, 1)
	image := cb.Images[0]
	for _, id := range []string{"push", "migrate", "deploy"} {
		assert.Contains(t, strings.Join(cb.Steps[ids[id]].Args, " "), image, "step %s uses the built image", id)
	}
}

// copyTree copies what tf-validate.sh needs to validate and plan-test a copy
// of the module: its .tf and template files, tests/ and environments/ (the
// plan tests plan the environments too), not tools/ or .terraform; and the
// repository's schemas/ beside it.
func copyTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	copySchemas(t, root)
	dir := filepath.Join(root, "terraform")
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "tools", ".terraform":
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dir, path), 0o755)
		}
		switch {
		case strings.HasSuffix(path, ".go"), strings.HasSuffix(path, ".md"), strings.HasSuffix(path, ".hcl.lock"):
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, path), b, 0o644)
	})
	require.NoError(t, err)
	return dir
}

// edit replaces old by new, once, in file of the copy dir.
func edit(t *testing.T, dir, file, old, new string) {
	t.Helper()
	path := filepath.Join(dir, file)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, strings.Contains(string(b), old), "the text to break is in %s:\n%s", file, old)
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644))
}

// requireTfValidateFails runs tf-validate.sh on the broken copy dir and
// checks that it fails in the plan tests, naming the failing run and, in its
// output, each of want.
func requireTfValidateFails(t *testing.T, dir, run string, want ...string) {
	t.Helper()
	out, err := validate(t, dir)
	require.Error(t, err, "the broken copy must fail tf-validate:\n%s", out)
	assert.Contains(t, out, "PLAN TESTS FAIL", "it fails in the plan tests, not before:\n%s", out)
	assert.Regexp(t, `run "`+regexp.QuoteMeta(run)+`"\.\.\. fail`, out, "run %s fails", run)
	flat := strings.Join(strings.Fields(out), " ") // messages are wrapped to the terminal's width
	for _, w := range want {
		assert.Contains(t, flat, w)
	}
}

// TestIssue45_PlanTestsPass: tf-validate.sh runs the plan tests
// (tests/*.tftest.hcl) on a copy of the module as it is, and they pass; the
// break tests below each change one thing in such a copy.
func TestIssue45_PlanTestsPass(t *testing.T) {
	t.Parallel()
	toolsReady(t)
	out, err := validate(t, copyTree(t))
	require.NoError(t, err, "the module and its plan tests pass:\n%s", out)
	assert.Contains(t, out, "plan tests pass")
	for _, file := range []string{"environments", "alerts", "iam", "sharding", "bootstrap", "schema"} {
		assert.Contains(t, out, "tests/"+file+".tftest.hcl")
	}
}

// TestIssue45_MissingGrantFails: Submit without its grant on the submit
// topic (it re-prompts itself there) fails the plan tests.
func TestIssue45_MissingGrantFails(t *testing.T) {
	t.Parallel()
	toolsReady(t)
	dir := copyTree(t)
	edit(t, dir, "main.tf", `publishes   = ["submit", "receipt", "completion"]
      signs       = true
      chains      = true
      env         = { TXFENCE_SUBMIT_BUDGET`, `publishes   = ["receipt", "completion"]
      signs       = true
      chains      = true
      env         = { TXFENCE_SUBMIT_BUDGET`)
	requireTfValidateFails(t, dir, "publisher_grants_cover_what_each_function_publishes", "submit/submit missing")
}

// TestIssue45_LateMetricAlertFails: an alert condition that filters on a
// txfence metric outside workload_metric_alerts (the outbox alert's
// absence condition of old, which Cloud Monitoring refused on the first
// apply) fails the plan tests.
func TestIssue45_LateMetricAlertFails(t *testing.T) {
	t.Parallel()
	toolsReady(t)
	dir := copyTree(t)
	edit(t, dir, "monitoring.tf", `      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "stuck" {`, `      disable_metric_validation = true
    }
  }

  conditions {
    display_name = "no outbox figures for 20 minutes"
    condition_absent {
      filter   = "resource.type = \"generic_task\" AND metric.type = \"workload.googleapis.com/outbox_oldest_age_seconds\""
      duration = "1200s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_MAX"
        cross_series_reducer = "REDUCE_MAX"
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "stuck" {`)
	requireTfValidateFails(t, dir, "first_apply_names_no_late_metric", "names a txfence (workload.googleapis.com) metric")
}

// TestIssue45_ShardWithoutEnvFails: a shard whose instance is created but
// not wired into the services' TXFENCE_DATABASES fails the plan tests.
func TestIssue45_ShardWithoutEnvFails(t *testing.T) {
	t.Parallel()
	toolsReady(t)
	dir := copyTree(t)
	edit(t, dir, "main.tf", `            for key in local.shard_keys :
            "${local.db_instances[key].shard}@`, `            for key in [local.shard_keys[0]] :
            "${local.db_instances[key].shard}@`)
	requireTfValidateFails(t, dir, "two_shards", "Every service gets TXFENCE_DATABASES naming both shards")
}

// TestIssue45_SecretVersionAtCreationFails: services that take the chains
// as a Cloud Run secret variable (whose version must exist when the
// service is created, which it does not with chains = null) fail the plan
// tests.
func TestIssue45_SecretVersionAtCreationFails(t *testing.T) {
	t.Parallel()
	toolsReady(t)
	dir := copyTree(t)
	edit(t, dir, "run.tf", `      dynamic "env" {
        for_each = local.function_env[each.key]
        content {
          name  = env.key
          value = env.value
        }
      }
`, `      dynamic "env" {
        for_each = local.function_env[each.key]
        content {
          name  = env.key
          value = env.value
        }
      }

      dynamic "env" {
        for_each = local.function_secrets[each.key]
        content {
          name = "${env.key}_FROM_RUN"
          value_source {
            secret_key_ref {
              secret  = google_secret_manager_secret.this[env.value].secret_id
              version = "latest"
            }
          }
        }
      }
`)
	requireTfValidateFails(t, dir, "prod_without_chains_applies", "No service takes a Cloud Run secret variable")
}

// TestIssue45_CIScopeFails: the CI identity with run.developer on the
// project again fails the plan tests.
func TestIssue45_CIScopeFails(t *testing.T) {
	t.Parallel()
	toolsReady(t)
	dir := copyTree(t)
	edit(t, dir, "iam.tf", `toset(["roles/cloudbuild.builds.viewer", "roles/logging.logWriter"])`,
		`toset(["roles/cloudbuild.builds.viewer", "roles/logging.logWriter", "roles/run.developer"])`)
	requireTfValidateFails(t, dir, "ci_identity_is_scoped", "no run.developer on the project")
}

// TestIssue49_CompletionSchemaFails: a completion topic that does not
// validate its messages against the schema (no schema_settings, or the
// binary encoding the functions do not publish) fails the plan tests.
func TestIssue49_CompletionSchemaFails(t *testing.T) {
	t.Parallel()
	toolsReady(t)
	for _, c := range []struct{ name, old, new string }{
		{"no schema", `for_each = each.key == "completion" ? [google_pubsub_schema.completion.id] : []`, `for_each = []`},
		{"binary encoding", `encoding = "JSON"`, `encoding = "BINARY"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := copyTree(t)
			edit(t, dir, "pubsub.tf", c.old, c.new)
			requireTfValidateFails(t, dir, "completion_topic_has_the_schema", "The completion topic validates against google_pubsub_schema.completion with JSON encoding")
		})
	}
}

// TestIssue49_LifecycleEnvFails: functions that do not get
// TXFENCE_TOPIC_LIFECYCLE from completion_lifecycle_events fail the plan
// tests.
func TestIssue49_LifecycleEnvFails(t *testing.T) {
	t.Parallel()
	toolsReady(t)
	dir := copyTree(t)
	edit(t, dir, "main.tf", "          TXFENCE_TOPIC_LIFECYCLE  = tostring(var.completion_lifecycle_events)\n", "")
	requireTfValidateFails(t, dir, "lifecycle_events_off_by_default", "Every function gets TXFENCE_TOPIC_LIFECYCLE=false by default")
}

// TestIssue45_CloudBuildDeploys: cloudbuild.yaml deploys one build at a
// time (a serialize step before the migration, on the txfence-deploy tag),
// by the digest it pushed rather than the tag, one service after the other
// with each new revision checked ready and serving, and then smoke-tests
// the API, putting it back on its previous revision when that fails.
func TestIssue45_CloudBuildDeploys(t *testing.T) {
	raw, err := os.ReadFile("../cloudbuild.yaml")
	require.NoError(t, err)
	var cb struct {
		cloudBuild `yaml:",inline"`
		Tags       []string `yaml:"tags"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &cb))
	steps := map[string]string{}
	waits := map[string][]string{}
	for _, s := range cb.Steps {
		steps[s.ID] = strings.Join(s.Args, " ")
		waits[s.ID] = s.WaitFor
	}
	assert.Contains(t, cb.Tags, "txfence-deploy")
	require.Contains(t, steps, "serialize")
	assert.Contains(t, steps["serialize"], "--ongoing")
	assert.Contains(t, steps["serialize"], "tags=txfence-deploy")
	assert.Equal(t, []string{"push"}, waits["serialize"])
	assert.Equal(t, []string{"serialize"}, waits["migrate"], "the migration waits for earlier deploys")
	assert.Contains(t, steps["push"], "RepoDigests", "the push step records the digest")
	for _, id := range []string{"migrate", "deploy"} {
		assert.Contains(t, steps[id], `--image="$$REF"`, "step %s deploys by digest", id)
		assert.NotContains(t, steps[id], "--image=${_REGION}", "step %s does not deploy by tag", id)
	}
	assert.Contains(t, steps["deploy"], "latestReadyRevisionName")
	assert.Contains(t, steps["deploy"], "txfence-resubmit-sweep txfence-api; do", "the API last")
	require.Contains(t, steps, "smoke")
	assert.Equal(t, []string{"deploy"}, waits["smoke"])
	assert.Contains(t, steps["smoke"], "/v1/openapi.json")
	assert.Contains(t, steps["smoke"], "update-traffic txfence-api")
}

// shellCommands returns the commands of the ```sh blocks of a Markdown
// page: logical lines (continuations joined), comments dropped, split at
// |, ||, && and ; outside quotes, the commands inside $(...) included,
// leading variable assignments and shell keywords skipped.
func shellCommands(md string) []string {
	var cmds []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(md, -1) {
		for _, line := range strings.Split(strings.ReplaceAll(block[1], "\\\n", " "), "\n") {
			cmds = append(cmds, lineCommands(line)...)
		}
	}
	return cmds
}

// lineCommands splits one shell line into its commands (see
// shellCommands).
func lineCommands(line string) []string {
	var cmds, words []string
	var word strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		endWord()
		for len(words) > 0 && (regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(words[0]) ||
			map[string]bool{"do": true, "done": true, "then": true, "fi": true, "if": true, "while": true, "else": true}[words[0]]) {
			words = words[1:]
		}
		if len(words) > 0 && words[0] == "for" {
			words = nil // for X in ...: the list's commands are in its $(...)
		}
		if len(words) > 0 {
			cmds = append(cmds, strings.Join(words, " "))
		}
		words = nil
	}
	// sub reads a $(...) starting at i (at the "("), returns its end.
	var sub func(i int) int
	sub = func(i int) int {
		depth, quote := 0, byte(0)
		for j := i; j < len(line); j++ {
			c := line[j]
			switch {
			case quote == '\'':
				if c == '\'' {
					quote = 0
				}
			case quote == '"' && c == '"':
				quote = 0
			case quote == 0 && (c == '\'' || c == '"'):
				quote = c
			case c == '(' && quote != '\'':
				depth++
			case c == ')' && quote != '\'':
				depth--
				if depth == 0 {
					cmds = append(cmds, lineCommands(line[i+1:j])...)
					return j
				}
			}
		}
		return len(line) - 1
	}
	quote := byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote == '\'':
			word.WriteByte(c)
			if c == '\'' {
				quote = 0
			}
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			end := sub(i + 1)
			word.WriteString("$(...)")
			inWord = true
			i = end
		case quote == '"':
			word.WriteByte(c)
			if c == '\\' && i+1 < len(line) {
				i++
				word.WriteByte(line[i])
			} else if c == '"' {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
			word.WriteByte(c)
			inWord = true
		case c == '#' && !inWord:
			i = len(line) // a comment
		case c == ' ' || c == '\t':
			endWord()
		case c == '|' || c == ';' || c == '&' && i+1 < len(line) && line[i+1] == '&':
			endCmd()
			if i+1 < len(line) && (line[i+1] == '|' || line[i+1] == '&') {
				i++
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

// TestIssue45_DeployDoc: docs/deploy.md takes a fresh project to a serving
// API in commands, and its checklist names every one of them (each command
// starts with a checklist entry, each entry is used, each test it names
// exists); the README links it. The commands that need no project, the
// configuration edits of steps 5 and 13, are run here on copies of both
// environments' examples.
func TestIssue45_DeployDoc(t *testing.T) {
	raw, err := os.ReadFile("../docs/deploy.md")
	require.NoError(t, err)
	doc := string(raw)
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(readme), "(docs/deploy.md)"), "the README links docs/deploy.md")

	for _, step := range []string{"APIs", "state bucket", "image repository", "first image", "RPC URLs", "Apply",
		"bootstrap", "first credential", "Signer keys", "DNS and the certificate", "first transaction",
		"alerts on txfence's own metrics", "Adding a shard"} {
		assert.Regexp(t, `(?im)^## \d+\. .*`+regexp.QuoteMeta(step), doc, "a step for %s", step)
	}

	// The checklist: | `command` | checked by |.
	_, checklist, found := strings.Cut(doc, "\n## Checklist\n")
	require.True(t, found, "docs/deploy.md has a Checklist section")
	entries := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\| (.+?) \\|$").FindAllStringSubmatch(checklist, -1) {
		entries[m[1]] = m[2]
	}
	require.NotEmpty(t, entries)
	used := map[string]bool{}
	for _, cmd := range shellCommands(doc) {
		best := ""
		for e := range entries {
			if (cmd == e || strings.HasPrefix(cmd, e+" ")) && len(e) > len(best) {
				best = e
			}
		}
		if assert.NotEmpty(t, best, "the checklist names the command %q", cmd) {
			used[best] = true
		}
	}
	var tests []byte
	require.NoError(t, filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		tests = append(tests, b...)
		return err
	}))
	for e, by := range entries {
		assert.True(t, used[e], "checklist entry %q is a command of the page", e)
		assert.Regexp(t, `fresh project|TestIssue`, by, "entry %q says what checks it", e)
		for _, name := range regexp.MustCompile(`TestIssue\d+_\w+`).FindAllString(by, -1) {
			assert.Contains(t, string(tests), "func "+name+"(", "entry %q names a test that exists", e)
		}
	}

	// Steps 5 and 13, run on copies of each environment's examples.
	block := func(after, contains string) string {
		_, rest, ok := strings.Cut(doc, after)
		require.True(t, ok, "docs/deploy.md has %q", after)
		for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(rest, -1) {
			if strings.Contains(m[1], contains) {
				return m[1]
			}
		}
		t.Fatalf("no sh block with %q after %q", contains, after)
		return ""
	}
	configure := block("## 5. ", "cp backend.hcl.example")
	var alerts []string
	for _, line := range strings.Split(block("## 13. ", "workload_metric_alerts"), "\n") {
		if strings.Contains(line, "terraform.tfvars") {
			alerts = append(alerts, line)
		}
	}
	require.Len(t, alerts, 2, "step 13 edits terraform.tfvars in two lines")
	for _, env := range []string{"dev", "prod"} {
		t.Run(env, func(t *testing.T) {
			root := t.TempDir()
			dst := filepath.Join(root, "terraform", "environments", env)
			require.NoError(t, os.MkdirAll(dst, 0o755))
			for _, f := range []string{"backend.hcl.example", "terraform.tfvars.example"} {
				b, err := os.ReadFile(filepath.Join("environments", env, f))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(dst, f), b, 0o644))
			}
			project := "acme-txfence-" + env
			script := "set -euo pipefail\nENV=" + env + "\nPROJECT=" + project + "\n" + configure + "\n" + strings.Join(alerts, "\n") + "\n"
			cmd := exec.Command("bash", "-c", script)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "steps 5 and 13:\n%s", out)

			backend, err := os.ReadFile(filepath.Join(dst, "backend.hcl"))
			require.NoError(t, err)
			assert.Contains(t, string(backend), `bucket = "`+project+`-tfstate"`)
			assert.Contains(t, string(backend), `prefix = "txfence/`+env+`"`)
			vars, err := os.ReadFile(filepath.Join(dst, "terraform.tfvars"))
			require.NoError(t, err)
			assert.Contains(t, string(vars), `project = "`+project+`"`)
			assert.NotContains(t, string(vars), "my-project", "every example project is replaced")
			assert.Equal(t, 1, strings.Count(string(vars), "workload_metric_alerts = true"), "step 13 turns the alerts on once")
		})
	}
}

// TestIssue45_AlertsAllChecked: every alert policy of monitoring.tf is in
// local.alert_policies, the map the plan tests check (no condition on a
// metric that does not exist at the first apply) and the alert_policies
// output lists, so a policy added later cannot escape either.
func TestIssue45_AlertsAllChecked(t *testing.T) {
	src, err := os.ReadFile("monitoring.tf")
	require.NoError(t, err)
	mon := string(src)
	block := regexp.MustCompile(`(?s)\n  alert_policies = merge\((.*?)\n  \)\n`).FindStringSubmatch(mon)
	require.NotNil(t, block, "monitoring.tf defines local.alert_policies")
	names := regexp.MustCompile(`(?m)^resource "google_monitoring_alert_policy" "(\w+)"`).FindAllStringSubmatch(mon, -1)
	require.GreaterOrEqual(t, len(names), 12)
	for _, n := range names {
		assert.Contains(t, block[1], "google_monitoring_alert_policy."+n[1], "local.alert_policies lists %s", n[1])
	}
	out, err := os.ReadFile("outputs.tf")
	require.NoError(t, err)
	assert.Regexp(t, `(?s)output "alert_policies" \{.*?for k, p in local\.alert_policies`, string(out), "the output lists every policy")
}
