package submit

import (
	"testing"
	"time"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// handler is the Submit function's handler over a node's use case.
func handler(t testing.TB, n *stacktest.Node) *Handler {
	t.Helper()
	h, err := NewHandler(n.Drain, time.Minute, n.Metrics, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return h
}
