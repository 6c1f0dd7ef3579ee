package auth

import (
	"fmt"
	"strings"

	"github.com/txfence/txfence/shared/txm"
)

// MaxTokenLen bounds a bearer token. Google ID tokens are about 1 KiB and
// API keys 67 bytes; anything near the bound is not a credential txfence
// issued or accepts.
const MaxTokenLen = 8 << 10

// ParseAuthorization reads an Authorization header. "Bearer <token>" (the
// scheme in any case, one space or more, a token of printable non-space
// ASCII at most MaxTokenLen long) is a credential; an empty header is no
// credential (Credential{}); anything else is an error wrapping
// txm.ErrUnauthenticated. The error never quotes the header.
func ParseAuthorization(header string) (txm.Credential, error) {
	if header == "" {
		return txm.Credential{}, nil
	}
	const scheme = "Bearer"
	if len(header) > len(scheme)+1+2*MaxTokenLen {
		return txm.Credential{}, refuse("authorization header is longer than %d bytes", len(scheme)+1+2*MaxTokenLen)
	}
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return txm.Credential{}, refuse("authorization scheme is not Bearer")
	}
	rest := header[len(scheme):]
	token := strings.TrimLeft(rest, " ")
	switch {
	case len(rest) == 0 || len(token) == len(rest):
		return txm.Credential{}, refuse(`authorization header is not "Bearer <token>"`)
	case token == "":
		return txm.Credential{}, refuse("bearer token is empty")
	case len(token) > MaxTokenLen:
		return txm.Credential{}, refuse("bearer token is longer than %d bytes", MaxTokenLen)
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < 0x21 || c > 0x7e {
			return txm.Credential{}, refuse("bearer token has a byte outside printable non-space ASCII")
		}
	}
	return txm.Credential{Bearer: token}, nil
}

// refuse is a refusal: txm.ErrUnauthenticated with why, for logs. Callers
// pass reasons that never carry a credential.
func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", txm.ErrUnauthenticated, fmt.Sprintf(format, args...))
}
