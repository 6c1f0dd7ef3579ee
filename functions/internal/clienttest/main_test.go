package clienttest_test

import (
	"testing"

	"github.com/txfence/txfence/shared/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
