package txm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRevert_String(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r        Revert
		text     string
		selector string
	}{
		{Revert{Kind: RevertKindError, Reason: "too low", Selector: [4]byte{0x08, 0xc3, 0x79, 0xa0}}, "too low", "0x08c379a0"},
		{Revert{Kind: RevertKindError, Selector: [4]byte{0x08, 0xc3, 0x79, 0xa0}}, "reverted with an empty reason", "0x08c379a0"},
		{Revert{Kind: RevertKindPanic, PanicCode: 0x12, Reason: "division or modulo by zero"},
			"panic 0x12: division or modulo by zero", "0x00000000"},
		{Revert{Kind: RevertKindCustom, Selector: [4]byte{0xde, 0xad, 0xbe, 0xef}}, "custom error 0xdeadbeef", "0xdeadbeef"},
		{Revert{Kind: RevertKindCustom, Reason: "E(x=1)", Name: "E"}, "E(x=1)", "0x00000000"},
		{Revert{Kind: RevertKindUnknown}, "no reason given", ""},
		{Revert{Kind: RevertKindUnknown, Data: []byte{1, 2}}, "unrecognised revert data (2 bytes)", ""},
	}
	for _, tt := range tests {
		require.Equal(t, tt.text, tt.r.String())
		require.Equal(t, tt.selector, tt.r.SelectorHex())
	}
}
