package txm

import (
	"encoding/json"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
)

// EffectKind is what an effect moves or allows.
type EffectKind string

const (
	// EffectNative moves native value (wei), at the top level or inside
	// the call (internal transfers) where the node traces them.
	EffectNative EffectKind = "native"
	// EffectERC20Transfer moves Amount of an ERC-20 token (Transfer with
	// three topics).
	EffectERC20Transfer EffectKind = "erc20_transfer"
	// EffectERC20Approval lets To (the spender) move up to Amount of From's
	// tokens; an Amount of 0 revokes.
	EffectERC20Approval EffectKind = "erc20_approval"
	// EffectERC721Transfer moves the token TokenID (Transfer with four
	// topics); Amount is 1.
	EffectERC721Transfer EffectKind = "erc721_transfer"
	// EffectERC721Approval lets To move the token TokenID; an approval to
	// the zero address clears it. Amount is 1.
	EffectERC721Approval EffectKind = "erc721_approval"
	// EffectApprovalForAll lets To (the operator) move every token of
	// From's in the collection (ERC-721 and ERC-1155 share the event):
	// Amount 1 grants, 0 revokes.
	EffectApprovalForAll EffectKind = "approval_for_all"
	// EffectERC1155Transfer moves Amount of the ERC-1155 token TokenID; a
	// TransferBatch is one effect per id.
	EffectERC1155Transfer EffectKind = "erc1155_transfer"
)

// Valid reports whether k is one of the kinds above.
func (k EffectKind) Valid() bool {
	switch k {
	case EffectNative, EffectERC20Transfer, EffectERC20Approval, EffectERC721Transfer,
		EffectERC721Approval, EffectApprovalForAll, EffectERC1155Transfer:
		return true
	}
	return false
}

// hasTokenID reports whether effects of kind k name a token id.
func (k EffectKind) hasTokenID() bool {
	return k == EffectERC721Transfer || k == EffectERC721Approval || k == EffectERC1155Transfer
}

// Effect is one thing a transaction moves or allows, as its simulation (or
// its receipt's logs) shows it. Token events are what the token contract
// emits: a token that lies in its events, or emits none, is seen as it
// says.
type Effect struct {
	Kind EffectKind
	// Token is the contract that emitted the event; the zero address for
	// native value.
	Token common.Address
	// From is the sender of value or tokens, or the owner granting an
	// approval. The zero address is a mint.
	From common.Address
	// To is the recipient, or the spender or operator of an approval. The
	// zero address is a burn (or a cleared ERC-721 approval).
	To common.Address
	// Amount is wei, token units, or 1 for one ERC-721 token (see the kinds
	// for approvals); never nil, never negative.
	Amount *big.Int
	// TokenID is the ERC-721 or ERC-1155 token id; nil for other kinds.
	TokenID *big.Int
}

// effectJSON is an Effect on the wire and in the database: addresses in
// CanonicalAddress form, numbers as decimal strings, token omitted for
// native value and tokenId for kinds without one.
type effectJSON struct {
	Kind    EffectKind `json:"kind"`
	Token   string     `json:"token,omitempty"`
	From    string     `json:"from"`
	To      string     `json:"to"`
	Amount  string     `json:"amount"`
	TokenID string     `json:"tokenId,omitempty"`
}

// MarshalJSON writes the effect's wire form.
func (e Effect) MarshalJSON() ([]byte, error) {
	if !e.Kind.Valid() {
		return nil, fmt.Errorf("marshal effect: unknown kind %q", e.Kind)
	}
	j := effectJSON{Kind: e.Kind, From: CanonicalAddress(e.From), To: CanonicalAddress(e.To), Amount: "0"}
	if e.Kind != EffectNative {
		j.Token = CanonicalAddress(e.Token)
	}
	if e.Amount != nil {
		j.Amount = e.Amount.String()
	}
	if e.Kind.hasTokenID() {
		j.TokenID = "0"
		if e.TokenID != nil {
			j.TokenID = e.TokenID.String()
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the wire form; a malformed field is a
// *ValidationError naming it.
func (e *Effect) UnmarshalJSON(b []byte) error {
	var j effectJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("%w: effect: %v", ErrInvalid, err)
	}
	v := &ValidationError{}
	out := Effect{Kind: j.Kind}
	if !j.Kind.Valid() {
		v.Add("kind", "unknown effect kind %q", j.Kind)
	}
	addr := func(field, s string) common.Address {
		a, err := ParseAddress(s)
		if err != nil {
			v.Add(field, "%s", err.Error())
		}
		return a
	}
	switch {
	case j.Kind == EffectNative && j.Token != "":
		v.Add("token", "native value has no token")
	case j.Kind != EffectNative:
		out.Token = addr("token", j.Token)
	}
	out.From = addr("from", j.From)
	out.To = addr("to", j.To)
	out.Amount = parseUint(v, "amount", j.Amount)
	switch {
	case j.Kind.hasTokenID():
		out.TokenID = parseUint(v, "tokenId", j.TokenID)
	case j.TokenID != "":
		v.Add("tokenId", "%s has no token id", j.Kind)
	}
	if err := v.Err(); err != nil {
		return err
	}
	*e = out
	return nil
}

// parseUint reads a required non-negative decimal integer in its one
// written form (no sign, no leading zeros).
func parseUint(v *ValidationError, field, s string) *big.Int {
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || n.Sign() < 0 || n.String() != s {
		v.Add(field, "must be a non-negative decimal integer, got %q", s)
		return nil
	}
	return n
}
