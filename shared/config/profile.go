package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// ChainKind names a built-in chain profile.
type ChainKind string

const (
	// KindGeneric is a chain about which nothing is assumed: every field is
	// the global setting. A chain TXFENCE_CHAIN_PROFILES does not name is
	// generic.
	KindGeneric ChainKind = "generic"
	// KindL1 is Ethereum mainnet and its test networks: 12 s slots and a
	// `finalized` tag two epochs behind.
	KindL1 ChainKind = "l1"
	// KindOPStack is an OP Stack rollup (Optimism, Base, ...): 2 s blocks,
	// an L1 data fee priced by the GasPriceOracle predeploy.
	KindOPStack ChainKind = "op-stack"
	// KindArbitrum is an Arbitrum chain: a sequencer with no public
	// mempool, 250 ms blocks, an L1 component priced by NodeInterface, no
	// priority fee.
	KindArbitrum ChainKind = "arbitrum"
)

// ChainKinds are the built-in profiles, in the reference's order.
var ChainKinds = []ChainKind{KindGeneric, KindL1, KindOPStack, KindArbitrum}

// DataFeeKind is how a chain prices the data its transactions post to
// another chain, paid on top of the gas.
type DataFeeKind string

const (
	DataFeeNone     DataFeeKind = "none"
	DataFeeOPStack  DataFeeKind = "op-stack" // GasPriceOracle.getL1Fee(bytes) at 0x42…0F
	DataFeeArbitrum DataFeeKind = "arbitrum" // NodeInterface.gasEstimateL1Component at 0x…C8
)

// TipSource is where a new attempt's priority fee comes from.
type TipSource string

const (
	// TipNode asks eth_maxPriorityFeePerGas, falling back to the fee
	// history only when the node does not serve it.
	TipNode TipSource = "node"
	// TipFeeHistory takes a percentile of recent blocks' rewards.
	TipFeeHistory TipSource = "fee-history"
)

// ChainProfile is everything txfence assumes about one chain: its kind's
// built-in defaults, the global settings where the kind has none, and the
// chain's own entry in TXFENCE_CHAIN_PROFILES over both.
type ChainProfile struct {
	ID                   uint64
	Kind                 ChainKind
	BlockTime            time.Duration
	FinalityMode         FinalityMode
	Confirmations        uint64
	MaxInFlight          int
	DelegatedMaxInFlight int
	TipSource            TipSource
	FeeHistoryPercentile float64
	FeeHistoryBlocks     int
	BumpPercent          int
	BumpAfter            time.Duration
	PublicMempool        bool
	DataFee              DataFeeKind
	LagBlocks            uint64
	Fees                 ChainFees
}

// ProfileSpec is one chain's entry in TXFENCE_CHAIN_PROFILES (and a
// built-in kind's defaults): the kind, and the fields it sets; a nil field
// keeps what is under it.
type ProfileSpec struct {
	Kind                 ChainKind     `json:"kind"`
	BlockTime            *Duration     `json:"blockTime"`
	Finality             *FinalityMode `json:"finality"`
	Confirmations        *uint64       `json:"confirmations"`
	MaxInFlight          *int          `json:"maxInFlight"`
	DelegatedMaxInFlight *int          `json:"delegatedMaxInFlight"`
	TipSource            *TipSource    `json:"tipSource"`
	FeeHistoryPercentile *float64      `json:"feeHistoryPercentile"`
	FeeHistoryBlocks     *int          `json:"feeHistoryBlocks"`
	MinTip               *Wei          `json:"minTip"`
	MaxFee               *Wei          `json:"maxFee"`
	MaxTip               *Wei          `json:"maxTip"`
	TxFeeCap             *Wei          `json:"txFeeCap"`
	MaxBumps             *int          `json:"maxBumps"`
	BumpPercent          *int          `json:"bumpPercent"`
	BumpAfter            *Duration     `json:"bumpAfter"`
	PublicMempool        *bool         `json:"publicMempool"`
	DataFee              *DataFeeKind  `json:"dataFee"`
	LagBlocks            *uint64       `json:"lagBlocks"`
}

// profileDocs are the reference's words for each field of ProfileSpec
// (by its JSON name) and the global setting that gives it when neither
// the kind nor the entry does ("" for a field with a fixed default).
var profileDocs = map[string]struct{ global, def, doc string }{
	"blockTime":            {"", "2s", "the chain's block time: how often each endpoint's head is asked for"},
	"finality":             {EnvFinalityMode, "", "`confirmations` (a depth) or `finalized` (the chain's `finalized` tag)"},
	"confirmations":        {EnvConfirmations, "", "the depth a receipt's block must reach (`confirmations`)"},
	"maxInFlight":          {EnvMaxInFlight, "", "a signer's broadcast but unmined transactions"},
	"delegatedMaxInFlight": {EnvDelegatedMaxInFlight, "", "the same for a signer carrying an EIP-7702 delegation"},
	"tipSource":            {"", "node", "`node` (eth_maxPriorityFeePerGas, the fee history only where the node lacks it) or `fee-history`"},
	"feeHistoryPercentile": {"", "50", "the percentile of recent blocks' tips the fee history gives"},
	"feeHistoryBlocks":     {"", "10", "how many recent blocks the fee history reads"},
	"minTip":               {EnvMinPriorityFee, "", "the tip floor, in wei"},
	"maxFee":               {EnvMaxFeeCap, "", "the highest max fee per gas automatic attempts pay, in wei"},
	"maxTip":               {EnvMaxTipCap, "", "the highest tip automatic attempts pay, in wei"},
	"txFeeCap":             {EnvTxFeeCap, "", "the nodes' cap on a transaction's fee, in wei"},
	"maxBumps":             {EnvMaxBumps, "", "fee replacements per transaction"},
	"bumpPercent":          {EnvBumpPercent, "", "each replacement pays at least this much more"},
	"bumpAfter":            {EnvBumpAfter, "", "replace an attempt not mined this long after its broadcast"},
	"publicMempool":        {"", "true", "whether the chain's nodes keep a public pool: without one, silence is answered by sending the same bytes again, never by a bump"},
	"dataFee":              {"", "none", "how the data fee paid on top of the gas is priced: `none`, `op-stack` or `arbitrum`"},
	"lagBlocks":            {"", "5", "an endpoint more than this many blocks behind the best is not read from until it catches up"},
}

// builtinProfiles are the kinds' defaults; a field they leave nil is the
// global setting (or profileDocs' fixed default).
var builtinProfiles = map[ChainKind]ProfileSpec{
	KindGeneric: {Kind: KindGeneric},
	KindL1:      {Kind: KindL1, BlockTime: dur(12 * time.Second), Finality: ptr(FinalityFinalized), LagBlocks: ptr[uint64](3)},
	KindOPStack: {Kind: KindOPStack, BlockTime: dur(2 * time.Second), Finality: ptr(FinalityConfirmations),
		Confirmations: ptr[uint64](10), BumpAfter: dur(12 * time.Second), DataFee: ptr(DataFeeOPStack), LagBlocks: ptr[uint64](10)},
	KindArbitrum: {Kind: KindArbitrum, BlockTime: dur(250 * time.Millisecond), Finality: ptr(FinalityConfirmations),
		Confirmations: ptr[uint64](20), MinTip: wei(0), PublicMempool: ptr(false), DataFee: ptr(DataFeeArbitrum),
		LagBlocks: ptr[uint64](40)},
}

// Profile is chain id's profile: generic unless TXFENCE_CHAIN_PROFILES
// names it.
func (c Config) Profile(id uint64) ChainProfile {
	p := ChainProfile{ID: id, Kind: KindGeneric, BlockTime: 2 * time.Second, FinalityMode: c.FinalityMode,
		Confirmations: c.Confirmations, MaxInFlight: c.MaxInFlight, DelegatedMaxInFlight: c.DelegatedMaxInFlight,
		TipSource: TipNode, FeeHistoryPercentile: 50, FeeHistoryBlocks: 10, BumpPercent: c.BumpPercent,
		BumpAfter: c.BumpAfter, PublicMempool: true, DataFee: DataFeeNone, LagBlocks: 5}
	spec, named := c.ChainProfiles[id]
	if named {
		p.apply(builtinProfiles[spec.Kind])
		p.apply(spec)
	}
	p.Fees = c.Fees().For(id)
	return p
}

// profiles resolves the profiles of the chains TXFENCE_CHAIN_PROFILES
// names, for a use case: a chain it does not name (and every chain of a
// use case built in code, whose resolver is nil) keeps the use case's own
// fields, the global settings.
type profiles func(id uint64) (ChainProfile, bool)

// profiles is c's resolver.
func (c Config) profiles() profiles {
	if len(c.ChainProfiles) == 0 {
		return nil
	}
	return func(id uint64) (ChainProfile, bool) {
		if _, named := c.ChainProfiles[id]; !named {
			return ChainProfile{}, false
		}
		return c.Profile(id), true
	}
}

// named is chain id's profile, if TXFENCE_CHAIN_PROFILES names it.
func (p profiles) named(id uint64) (ChainProfile, bool) {
	if p == nil {
		return ChainProfile{}, false
	}
	return p(id)
}

// apply sets the fields s sets (fees are Fees.For's).
func (p *ChainProfile) apply(s ProfileSpec) {
	if s.Kind != "" {
		p.Kind = s.Kind
	}
	set(&p.BlockTime, (*time.Duration)(s.BlockTime))
	set(&p.FinalityMode, s.Finality)
	set(&p.Confirmations, s.Confirmations)
	set(&p.MaxInFlight, s.MaxInFlight)
	set(&p.DelegatedMaxInFlight, s.DelegatedMaxInFlight)
	set(&p.TipSource, s.TipSource)
	set(&p.FeeHistoryPercentile, s.FeeHistoryPercentile)
	set(&p.FeeHistoryBlocks, s.FeeHistoryBlocks)
	set(&p.BumpPercent, s.BumpPercent)
	set(&p.BumpAfter, (*time.Duration)(s.BumpAfter))
	set(&p.PublicMempool, s.PublicMempool)
	set(&p.DataFee, s.DataFee)
	set(&p.LagBlocks, s.LagBlocks)
}

// feeOverride is the part of s that Fees.For lays over the global fees.
func (s ProfileSpec) feeOverride() FeeOverride {
	o := FeeOverride{MaxFee: s.MaxFee.big(), MaxTip: s.MaxTip.big(), MinTip: s.MinTip.big(), TxFeeCap: s.TxFeeCap.big(), MaxBumps: -1}
	if s.MaxBumps != nil {
		o.MaxBumps = *s.MaxBumps
	}
	if s.BumpPercent != nil {
		o.BumpPercent = *s.BumpPercent
	}
	return o
}

// over lays o's set fields over base's.
func (o FeeOverride) over(base FeeOverride) FeeOverride {
	for _, f := range []struct{ dst, src **big.Int }{{&base.MaxFee, &o.MaxFee}, {&base.MaxTip, &o.MaxTip},
		{&base.MinTip, &o.MinTip}, {&base.TxFeeCap, &o.TxFeeCap}} {
		if *f.src != nil {
			*f.dst = *f.src
		}
	}
	if o.MaxBumps >= 0 {
		base.MaxBumps = o.MaxBumps
	}
	if o.BumpPercent > 0 {
		base.BumpPercent = o.BumpPercent
	}
	return base
}

// validate reports what is wrong with p, each problem naming the chain.
func (p ChainProfile) validate() []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if p.BlockTime <= 0 {
		add("blockTime must be positive, got %s", p.BlockTime)
	}
	switch {
	case p.FinalityMode != FinalityConfirmations && p.FinalityMode != FinalityFinalized:
		add("finality must be %q or %q, got %q", FinalityConfirmations, FinalityFinalized, p.FinalityMode)
	case p.FinalityMode == FinalityConfirmations && p.Confirmations < 1:
		add("confirmations must be at least 1, got %d", p.Confirmations)
	}
	if p.MaxInFlight < 1 {
		add("maxInFlight must be at least 1, got %d", p.MaxInFlight)
	}
	if p.DelegatedMaxInFlight < 1 {
		add("delegatedMaxInFlight must be at least 1, got %d", p.DelegatedMaxInFlight)
	}
	if p.TipSource != TipNode && p.TipSource != TipFeeHistory {
		add("tipSource must be %q or %q, got %q", TipNode, TipFeeHistory, p.TipSource)
	}
	if p.FeeHistoryPercentile < 0 || p.FeeHistoryPercentile > 100 {
		add("feeHistoryPercentile must be between 0 and 100, got %g", p.FeeHistoryPercentile)
	}
	if p.FeeHistoryBlocks < 1 || p.FeeHistoryBlocks > 1024 {
		add("feeHistoryBlocks must be between 1 and 1024, got %d", p.FeeHistoryBlocks)
	}
	if p.BumpPercent < txm.MinBumpPercent || p.BumpPercent > 1000 {
		add("bumpPercent must be between %d (the nodes' replacement rule) and 1000, got %d", txm.MinBumpPercent, p.BumpPercent)
	}
	if p.BumpAfter <= 0 {
		add("bumpAfter must be positive, got %s", p.BumpAfter)
	}
	if !slices.Contains([]DataFeeKind{DataFeeNone, DataFeeOPStack, DataFeeArbitrum}, p.DataFee) {
		add("dataFee must be %q, %q or %q, got %q", DataFeeNone, DataFeeOPStack, DataFeeArbitrum, p.DataFee)
	}
	if p.LagBlocks < 1 {
		add("lagBlocks must be at least 1, got %d", p.LagBlocks)
	}
	return bad
}

// chainProfiles parses TXFENCE_CHAIN_PROFILES: a JSON object from chain id
// (a decimal string) to its entry; every field but kind optional, unknown
// fields refused.
func (p *parser) chainProfiles(env string, dst *map[uint64]ProfileSpec) {
	v, ok := p.get(env)
	if !ok {
		return
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		p.bad(env, "must be a JSON object from chain id to profile, as {\"10\":{\"kind\":\"op-stack\"}}: %s", jsonProblem(err))
		return
	}
	out := make(map[uint64]ProfileSpec, len(raw))
	for _, key := range slices.Sorted(maps.Keys(raw)) {
		id, err := strconv.ParseUint(key, 10, 64)
		if err != nil || id == 0 {
			p.bad(env, "key %q must be a positive chain id", key)
			return
		}
		dec := json.NewDecoder(bytes.NewReader(raw[key]))
		dec.DisallowUnknownFields()
		var spec ProfileSpec
		if err := dec.Decode(&spec); err != nil {
			p.bad(env, "chain %d: %s", id, jsonProblem(err))
			return
		}
		if spec.Kind == "" {
			spec.Kind = KindGeneric
		}
		if _, known := builtinProfiles[spec.Kind]; !known {
			p.bad(env, "chain %d: kind must be one of %s, got %q", id, kindList(), spec.Kind)
			return
		}
		out[id] = spec
	}
	*dst = out
}

// validateProfiles checks each named chain's resolved profile, and that
// TXFENCE_CHAIN_FEES and TXFENCE_CHAIN_PROFILES do not both set one fee.
func (c Config) validateProfiles(bad func(env, format string, args ...any)) {
	for _, id := range slices.Sorted(maps.Keys(c.ChainProfiles)) {
		if _, ok := c.Chain(id); !ok && !c.NoChains {
			bad(EnvChainProfiles, "chain %d is not in %s", id, EnvChains)
			continue
		}
		for _, problem := range c.Profile(id).validate() {
			bad(EnvChainProfiles, "chain %d: %s", id, problem)
		}
		if both := feesSetTwice(c.ChainFees[id], c.ChainProfiles[id]); len(both) > 0 {
			bad(EnvChainProfiles, "chain %d: %s set here and in %s; set each once", id, strings.Join(both, ", "), EnvChainFees)
		}
	}
}

// feesSetTwice names the fees both o and s set.
func feesSetTwice(o FeeOverride, s ProfileSpec) []string {
	var both []string
	for _, f := range []struct {
		name string
		a, b bool
	}{
		{"maxFee", o.MaxFee != nil, s.MaxFee != nil}, {"maxTip", o.MaxTip != nil, s.MaxTip != nil},
		{"minTip", o.MinTip != nil, s.MinTip != nil}, {"txFeeCap", o.TxFeeCap != nil, s.TxFeeCap != nil},
		{"maxBumps", o.MaxBumps >= 0, s.MaxBumps != nil},
	} {
		if f.a && f.b {
			both = append(both, f.name)
		}
	}
	return both
}

// profileReference is the reference's section on chain profiles: one row
// per field, one column per built-in kind.
func profileReference() string {
	var b strings.Builder
	b.WriteString("\n## Chain profiles\n\n")
	b.WriteString("`" + EnvChainProfiles + "` gives a chain a kind and overrides any field of it, as JSON from chain id to entry: " +
		"`{\"10\":{\"kind\":\"op-stack\",\"confirmations\":20},\"42161\":{\"kind\":\"arbitrum\"}}` (durations as `\"12s\"`, wei as decimal strings). " +
		"A chain it does not name is `generic`. A field is the entry's, else its kind's default below, else the global setting the table names. " +
		"A fee set here must not also be set in `" + EnvChainFees + "`.\n\n")
	b.WriteString("| field | " + strings.Join(kindStrings(), " | ") + " | what |\n|---|" + strings.Repeat("---|", len(ChainKinds)) + "---|\n")
	t := reflect.TypeOf(ProfileSpec{})
	for i := range t.NumField() {
		name := t.Field(i).Tag.Get("json")
		if name == "kind" {
			continue
		}
		d := profileDocs[name]
		b.WriteString("| `" + name + "` |")
		for _, k := range ChainKinds {
			v := reflect.ValueOf(builtinProfiles[k]).Field(i)
			switch {
			case !v.IsNil():
				b.WriteString(" `" + fmt.Sprint(v.Elem().Interface()) + "` |")
			case d.global != "":
				b.WriteString(" `" + d.global + "` |")
			default:
				b.WriteString(" `" + d.def + "` |")
			}
		}
		b.WriteString(" " + d.doc + " |\n")
	}
	return b.String()
}

// Duration is a time.Duration written in JSON as "12s".
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("a duration is a string such as \"12s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"12s\"", s)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) String() string { return time.Duration(d).String() }

// Wei is an amount in wei, written in JSON as a decimal string (or a whole
// number).
type Wei big.Int

func (w *Wei) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, ok := new(big.Int).SetString(s, 10)
	if !ok || v.Sign() < 0 {
		return fmt.Errorf("%s is not a decimal number of wei", b)
	}
	*w = Wei(*v)
	return nil
}

func (w *Wei) big() *big.Int {
	if w == nil {
		return nil
	}
	return new(big.Int).Set((*big.Int)(w))
}

func (w Wei) String() string { return (*big.Int)(&w).String() }

// jsonProblem says what a JSON error means without echoing the value (a
// profile carries no secret, but the variable may be mistaken for one).
func jsonProblem(err error) string {
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return fmt.Sprintf("field %q must be a %s", typ.Field, typ.Type)
	}
	return err.Error()
}

func kindStrings() []string {
	out := make([]string, len(ChainKinds))
	for i, k := range ChainKinds {
		out[i] = string(k)
	}
	return out
}

func kindList() string { return strings.Join(kindStrings(), ", ") }

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func ptr[T any](v T) *T { return &v }

func dur(d time.Duration) *Duration { v := Duration(d); return &v }

func wei(n int64) *Wei { v := Wei(*big.NewInt(n)); return &v }
