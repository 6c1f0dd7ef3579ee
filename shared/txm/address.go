package txm

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/common"
)

// CanonicalAddress is the one form in which addresses are stored and compared:
// 0x followed by 40 lower-case hex digits.
func CanonicalAddress(a common.Address) string {
	var b [42]byte
	b[0], b[1] = '0', 'x'
	hex.Encode(b[2:], a[:])
	return string(b[:])
}

// ParseAddress accepts a 0x-prefixed 40-digit hex address. All-lower and
// all-upper case are accepted as they are; mixed case must be a valid EIP-55
// checksum.
func ParseAddress(s string) (common.Address, error) {
	if !strings.HasPrefix(s, "0x") && !strings.HasPrefix(s, "0X") {
		return common.Address{}, errAddress("must start with 0x")
	}
	hex := s[2:]
	if len(hex) != 40 {
		return common.Address{}, errAddress("must have 40 hex digits, got %d", len(hex))
	}
	var lower, upper bool
	for _, c := range hex {
		switch {
		case c >= 'a' && c <= 'f':
			lower = true
		case c >= 'A' && c <= 'F':
			upper = true
		case c < '0' || c > '9':
			return common.Address{}, errAddress("contains a non-hex character %q", c)
		}
	}
	a := common.HexToAddress(hex)
	// Mixed case is an EIP-55 checksum, which must hold.
	if lower && upper && a.Hex()[2:] != hex {
		return common.Address{}, errAddress("EIP-55 checksum mismatch (expected %s)", a.Hex())
	}
	return a, nil
}

// AddressError explains why an address was rejected.
type AddressError struct{ Reason string }

func (e *AddressError) Error() string { return "invalid address: " + e.Reason }

func errAddress(format string, args ...any) error {
	return &AddressError{Reason: fmt.Sprintf(format, args...)}
}
