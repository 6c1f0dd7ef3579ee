package redact

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"https://user:pw@mainnet.example.io/v3/SECRET": "https://mainnet.example.io/...",
		"http://127.0.0.1:8545":                        "http://127.0.0.1:8545",
		"http://127.0.0.1:8545/":                       "http://127.0.0.1:8545",
		"wss://node.example?key=SECRET":                "wss://node.example/...",
		"https://node.example#SECRET":                  "https://node.example/...",
		"https://user:pw@node.example":                 "https://node.example",
		"http://[::1]:8545/v2/SECRET":                  "http://[::1]:8545/...",
		"http://user:pw@127.0.0.1:x/v3/SECRET":         Unparsable,
		"user:pw@node.example/v3/SECRET":               Unparsable,
		"":                                             Unparsable,
	} {
		assert.Equal(t, want, URL(raw), raw)
	}
}

// TestText covers the forms in which libraries quote a URL: as configured,
// with the password masked (net/http), without the user info (go-ethereum's
// WebSocket dialer), escaped (url.URL.String), inside parentheses, and the
// pieces a server echoes back.
func TestText(t *testing.T) {
	t.Parallel()
	const raw = "http://alice:hunter2hunter2@127.0.0.1:8545/v3/PATHKEY0123?apikey=QUERYKEY456&x=1"
	u, err := url.Parse(raw)
	require.NoError(t, err)
	for _, in := range []string{
		`Post "` + raw + `": dial tcp 127.0.0.1:8545: connect: connection refused`,
		`Post "http://alice:***@127.0.0.1:8545/v3/PATHKEY0123?apikey=QUERYKEY456&x=1": EOF`,
		`dial "http://127.0.0.1:8545/v3/PATHKEY0123?apikey=QUERYKEY456&x=1" failed`,
		`Post "` + u.Redacted() + `": EOF`,
		`endpoint (` + raw + `): timeout`,
		`404 Not Found: no route for /v3/PATHKEY0123?apikey=QUERYKEY456&x=1`,
		`401 Unauthorized: invalid key PATHKEY0123`,
		`429 Too Many Requests: key QUERYKEY456 over its quota`,
		`bad password hunter2hunter2 for alice`,
	} {
		out := Text(in, raw)
		for _, secret := range []string{"PATHKEY0123", "QUERYKEY456", "hunter2", "apikey="} {
			assert.NotContains(t, out, secret, "in %q", in)
		}
		assert.Equal(t, out, Text(out, raw), "redacting twice changes nothing more")
		t.Logf("%s\n  => %s", in, out)
	}
	assert.Equal(t, `Post "http://127.0.0.1:8545/...": EOF`, Text(`Post "`+raw+`": EOF`), "URLs are redacted without knowing them")
	assert.Equal(t, `Post "http://127.0.0.1:8545/...": EOF`, Text(`Post "http://user:***@127.0.0.1:8545/v3/K%20EY": EOF`))
	assert.Equal(t, "endpoint 0 (http://127.0.0.1:8545/...): x", Text("endpoint 0 ("+raw+"): x"))
	assert.Equal(t, "dial http://[::1]:8545/..., then", Text("dial http://[::1]:8545/v2/KEY, then"))
	assert.Equal(t, `parse "`+Unparsable+`": invalid port`, Text(`parse "http://u:pw@h:x/KEY": invalid port`))
	for _, s := range []string{
		"endpoint 0 (http://127.0.0.1:8545/...): check chain id: EOF",
		"endpoint 1 (http://127.0.0.1:8545): check chain id: EOF",
		"alice asked for x=1",
	} {
		assert.Equal(t, s, Text(s, raw), "names and short words are left as they are")
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	require.NoError(t, Error(nil, "http://h/KEY"))
	plain := errors.New("connection refused")
	require.Same(t, plain, Error(plain, "http://h/KEY"), "nothing to hide: the same error")

	inner := &url.Error{Op: "Post", URL: "http://h:1/v3/SECRETKEY1", Err: io.EOF}
	err := Error(fmt.Errorf("call: %w", inner), "http://h:1/v3/SECRETKEY1")
	require.Equal(t, `call: Post "http://h:1/...": EOF`, err.Error())
	require.ErrorIs(t, err, io.EOF)
	var ue *url.Error
	require.ErrorAs(t, err, &ue)
}
