package auth_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/auth"
	"github.com/txfence/txfence/shared/txm"
)

func TestIssue11_AuthHeaderParsing(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", auth.MaxTokenLen)
	for _, tc := range []struct {
		name, header, bearer string
		refused              bool
	}{
		{name: "no header is no credential", header: ""},
		{name: "bearer", header: "Bearer abc.def.ghi", bearer: "abc.def.ghi"},
		{name: "scheme in any case", header: "bEaReR tok", bearer: "tok"},
		{name: "several spaces", header: "Bearer    tok", bearer: "tok"},
		{name: "longest token", header: "Bearer " + long, bearer: long},
		{name: "api key", header: "Bearer txfk_k_0123456789abcdef_x", bearer: "txfk_k_0123456789abcdef_x"},
		{name: "token too long", header: "Bearer " + long + "a", refused: true},
		{name: "header far too long", header: "Bearer " + strings.Repeat(" ", 3*auth.MaxTokenLen) + "a", refused: true},
		{name: "basic", header: "Basic dXNlcjpwYXNz", refused: true},
		{name: "scheme only", header: "Bearer", refused: true},
		{name: "scheme and space", header: "Bearer ", refused: true},
		{name: "no space", header: "Bearertok", refused: true},
		{name: "tab", header: "Bearer\ttok", refused: true},
		{name: "two tokens", header: "Bearer a b", refused: true},
		{name: "trailing space", header: "Bearer tok ", refused: true},
		{name: "leading space", header: " Bearer tok", refused: true},
		{name: "control byte", header: "Bearer to\x00k", refused: true},
		{name: "non-ascii", header: "Bearer tök", refused: true},
		{name: "bare token", header: "abc.def.ghi", refused: true},
		{name: "short", header: "Bear", refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := auth.ParseAuthorization(tc.header)
			if tc.refused {
				require.ErrorIs(t, err, txm.ErrUnauthenticated)
				assert.Equal(t, txm.Credential{}, c)
				assert.Contains(t, headerRefusals, err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.bearer, c.Bearer)
		})
	}
}

// headerRefusals is every error ParseAuthorization returns: a closed set of
// texts, so no header can ever be echoed into a log.
var headerRefusals = []string{
	"unauthenticated: authorization header is longer than 16391 bytes",
	"unauthenticated: authorization scheme is not Bearer",
	`unauthenticated: authorization header is not "Bearer <token>"`,
	"unauthenticated: bearer token is empty",
	"unauthenticated: bearer token is longer than 8192 bytes",
	"unauthenticated: bearer token has a byte outside printable non-space ASCII",
}

func FuzzParseAuthorization(f *testing.F) {
	for _, s := range []string{"", "Bearer abc", "bearer   x.y.z", "Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "Bearer a b",
		"Bearer txfk_k_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		c, err := auth.ParseAuthorization(header)
		if err != nil {
			if !errors.Is(err, txm.ErrUnauthenticated) {
				t.Fatalf("refusal %v does not wrap ErrUnauthenticated", err)
			}
			if c != (txm.Credential{}) {
				t.Fatalf("refusal with a credential")
			}
			found := false
			for _, r := range headerRefusals {
				found = found || err.Error() == r
			}
			if !found {
				t.Fatalf("refusal %q is not one of the fixed texts: it may echo the header", err)
			}
			return
		}
		if header == "" {
			if c.Bearer != "" {
				t.Fatalf("empty header gave a credential")
			}
			return
		}
		tok := c.Bearer
		if tok == "" || len(tok) > auth.MaxTokenLen || !strings.HasSuffix(header, tok) || !strings.EqualFold(header[:6], "Bearer") {
			t.Fatalf("accepted %q as %q", header, tok)
		}
		for i := 0; i < len(tok); i++ {
			if tok[i] <= ' ' || tok[i] > '~' {
				t.Fatalf("accepted token with byte %#x", tok[i])
			}
		}
		again, err := auth.ParseAuthorization("Bearer " + tok)
		if err != nil || again != c {
			t.Fatalf("token %q does not round-trip: %v, %v", tok, again, err)
		}
	})
}
