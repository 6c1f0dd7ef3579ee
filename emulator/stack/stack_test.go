package stack

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestIssue46_EnvOverride: the servers get the caller's TXFENCE_AUTH
// through Options.Auth, and a variable of the caller's environment that the
// stack sets otherwise for its servers is named in a warning rather than
// dropped without a word.
func TestIssue46_EnvOverride(t *testing.T) {
	t.Setenv("TXFENCE_AUTH", "apikey")
	t.Setenv("TXFENCE_CONFIRMATIONS", "12")
	var logs bytes.Buffer
	s := &Stack{opts: Options{Auth: "apikey", Confirmations: 3, Log: slog.New(slog.NewTextHandler(&logs, nil))}}
	assert.Contains(t, s.serverEnv(), "TXFENCE_AUTH=apikey")
	s.warnOverridden()
	assert.Contains(t, logs.String(), "variable=TXFENCE_CONFIRMATIONS")
	assert.NotContains(t, logs.String(), "TXFENCE_AUTH", "the caller's value is the one the servers get")

	logs.Reset()
	s.opts.Env = []string{"TXFENCE_CONFIRMATIONS=12"} // the stack's caller chose it
	s.warnOverridden()
	assert.NotContains(t, logs.String(), "TXFENCE_CONFIRMATIONS")
}
