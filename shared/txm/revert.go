package txm

import (
	"encoding/hex"
	"fmt"
)

// RevertKind is how a revert's data is encoded.
type RevertKind string

const (
	// RevertKindError is Solidity's Error(string): require(cond, "...") and
	// revert("..."). Reason is the string.
	RevertKindError RevertKind = "error"
	// RevertKindPanic is Solidity's Panic(uint256): a failed assert, an
	// arithmetic overflow, a division by zero, an index out of bounds...
	// PanicCode is the code and Reason its meaning.
	RevertKindPanic RevertKind = "panic"
	// RevertKindCustom is a custom error: a 4-byte Selector and ABI-encoded
	// arguments, which are decoded (Name, Args) only when the error's ABI
	// was given.
	RevertKindCustom RevertKind = "custom"
	// RevertKindUnknown is a revert without data (revert(), require without
	// a message, a failed call forwarded without its data) or data too
	// short or malformed for any of the others.
	RevertKindUnknown RevertKind = "unknown"
)

// Revert is what a revert's data says, decoded. It is built from data the
// chain returned, never from the caller's input alone.
type Revert struct {
	Kind RevertKind
	// Reason is the text to show: the Error(string) message; a panic code's
	// meaning; for a custom error, its signature with the decoded arguments
	// when its ABI was given; empty otherwise.
	Reason string
	// PanicCode is Panic(uint256)'s code (RevertKindPanic only).
	PanicCode uint64
	// Selector is the first four bytes of the data: the error's selector
	// (every kind but RevertKindUnknown).
	Selector [4]byte
	// Name is a custom error's name, when its ABI was given.
	Name string
	// Args are a custom error's arguments in order, when its ABI was given
	// and the data decodes with it.
	Args []RevertArg
	// Data is the raw revert data, nil when there was none.
	Data []byte
}

// RevertArg is one decoded argument of a custom error. Value is its text:
// integers in decimal, addresses checksummed, bytes as 0x-hex, strings as
// they are, arrays and tuples as JSON of their elements' texts.
type RevertArg struct {
	Name  string // empty when the ABI gave none
	Type  string // the canonical ABI type, e.g. uint256
	Value string
}

// SelectorHex is the selector as 0x-prefixed hex, empty for
// RevertKindUnknown.
func (r Revert) SelectorHex() string {
	if r.Kind == RevertKindUnknown || r.Kind == "" {
		return ""
	}
	return "0x" + hex.EncodeToString(r.Selector[:])
}

// String is a one-line reading of the revert, for an error message.
func (r Revert) String() string {
	switch r.Kind {
	case RevertKindError:
		if r.Reason == "" {
			return "reverted with an empty reason"
		}
		return r.Reason
	case RevertKindPanic:
		return fmt.Sprintf("panic 0x%02x: %s", r.PanicCode, r.Reason)
	case RevertKindCustom:
		if r.Reason != "" {
			return r.Reason
		}
		return "custom error " + r.SelectorHex()
	}
	if len(r.Data) == 0 {
		return "no reason given"
	}
	return fmt.Sprintf("unrecognised revert data (%d bytes)", len(r.Data))
}

// RevertDecoder decodes revert data with the caller's description of its
// custom errors.
type RevertDecoder interface {
	// DecodeRevert decodes data (never failing on the chain's data);
	// errorABI, when not empty, describes custom errors as a JSON ABI or a
	// signature. A malformed errorABI is an error matching ErrInvalid, also
	// when data is nil, so that a request's errorABI can be checked before
	// anything is simulated.
	DecodeRevert(data []byte, errorABI string) (Revert, error)
}

// RevertedError says a create's simulation reverted: the call would fail on
// chain. It matches ErrInvalid under errors.Is (HTTP 422).
type RevertedError struct {
	Revert Revert
}

func (e *RevertedError) Error() string { return "the call would revert: " + e.Revert.String() }

// Is makes a RevertedError match ErrInvalid.
func (e *RevertedError) Is(target error) bool { return target == ErrInvalid }
