package deps

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// terraformGrants reads, from the terraform module's local.functions, the
// topics each function's service account may publish to, by target.
func terraformGrants(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../../../terraform/main.tf")
	require.NoError(t, err)
	entry := regexp.MustCompile(`(?s)target\s*=\s*"(\w+)".*?publishes\s*=\s*\[([^\]]*)\]`)
	out := map[string][]string{}
	for _, m := range entry.FindAllStringSubmatch(string(b), -1) {
		var topics []string
		for _, q := range strings.Split(m[2], ",") {
			if q = strings.Trim(strings.TrimSpace(q), `"`); q != "" {
				topics = append(topics, q)
			}
		}
		sort.Strings(topics)
		out[m[1]] = topics
	}
	return out
}

// TestIssue45_PublisherGrants: every topic a function publishes to (the
// code's list, Publishes) is one terraform lets its service account
// publish to, and terraform grants nothing more: a publish its grants do
// not cover fails with PermissionDenied in production, where it is only
// logged, and the local stack has no IAM to show it.
func TestIssue45_PublisherGrants(t *testing.T) {
	t.Parallel()
	grants := terraformGrants(t)
	require.Len(t, grants, len(Publishes), "terraform's functions: %v", grants)
	for target, topics := range Publishes {
		want := append([]string(nil), topics...)
		sort.Strings(want)
		assert.Equal(t, want, grants[target], "%s: terraform/main.tf's publishes must be what it publishes", target)
	}
}
