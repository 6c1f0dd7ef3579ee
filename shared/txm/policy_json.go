package txm

import (
	"encoding/json"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// policyJSON is a Policy on the wire, in the database, in the seed and in
// the admin CLI's files: wei as decimal strings, addresses as hex, "*" for
// every signer.
type policyJSON struct {
	Principal    string     `json:"principal"`
	Version      int        `json:"version,omitempty"`
	Roles        []Role     `json:"roles"`
	Signers      []string   `json:"signers,omitempty"`
	MaxValue     string     `json:"maxValue,omitempty"`
	MaxGasLimit  uint64     `json:"maxGasLimit,omitempty"`
	MaxFeePerGas string     `json:"maxFeePerGas,omitempty"`
	SkipEstimate bool       `json:"skipEstimation,omitempty"`
	Simulation   string     `json:"simulation,omitempty"` // "enforce" (the default) or "advisory"
	Hourly       *limitJSON `json:"hourly,omitempty"`
	Daily        *limitJSON `json:"daily,omitempty"`
	Allowlist    *[]string  `json:"allowlist,omitempty"`
	// The rules on effects: token amounts as decimal strings of token
	// units.
	Tokens               []tokenRuleJSON `json:"tokens,omitempty"`
	TokenRecipients      *[]string       `json:"tokenRecipients,omitempty"`
	Spenders             *[]string       `json:"spenders,omitempty"`
	NoUnlimitedApprovals bool            `json:"noUnlimitedApprovals,omitempty"`
	Windows              []windowJSON    `json:"windows,omitempty"`
	RatePerSecond        float64         `json:"ratePerSecond,omitempty"`
	Burst                int             `json:"burst,omitempty"`
	MaxWaits             int             `json:"maxWaits,omitempty"`
	CreatedAt            *time.Time      `json:"createdAt,omitempty"`
	CreatedBy            string          `json:"createdBy,omitempty"`

	// Approvals: the rules above whose thresholds a transaction waits for
	// approval.
	Approvals []approvalRuleJSON `json:"approvals,omitempty"`
}

// tokenRuleJSON is a TokenRule on the wire: an object, so that a rolling
// window can join maxPerTx later.
type tokenRuleJSON struct {
	ChainID   uint64 `json:"chainId"`
	Token     string `json:"token"`
	MaxPerTx  string `json:"maxPerTx,omitempty"`
	Protected bool   `json:"protected,omitempty"`
}

// windowJSON is a Window on the wire: asset "native" or a token's address,
// the period as "day" or a duration ("30m", "1h", "7d"), maxAmount a
// decimal string of wei or token units.
type windowJSON struct {
	Scope     WindowScope `json:"scope"`
	Asset     string      `json:"asset"`
	ChainID   uint64      `json:"chainId,omitempty"`
	Period    string      `json:"period"`
	MaxAmount string      `json:"maxAmount,omitempty"`
	MaxCount  *int        `json:"maxCount,omitempty"`
}

// approvalRuleJSON is an ApprovalRule on the wire: the asset ("native" or
// a token address), the threshold as a decimal string (wei, or token
// units), the approvers (principals) or their role, and the expiry as a Go
// duration ("1h", "36h").
type approvalRuleJSON struct {
	Asset        string   `json:"asset"`
	ChainID      uint64   `json:"chainId,omitempty"`
	Above        string   `json:"above"`
	Required     int      `json:"required"`
	Approvers    []string `json:"approvers,omitempty"`
	ApproverRole Role     `json:"approverRole,omitempty"`
	ExpiresIn    string   `json:"expiresIn,omitempty"`
}

// The values of a policy's "simulation".
const (
	SimulationEnforce  = "enforce"
	SimulationAdvisory = "advisory"
)

type limitJSON struct {
	Value string `json:"value,omitempty"`
	Count int    `json:"count,omitempty"`
}

// MarshalJSON writes the policy's wire form.
func (p Policy) MarshalJSON() ([]byte, error) {
	j := policyJSON{Principal: p.Principal, Version: p.Version, Roles: p.Roles, MaxValue: weiText(p.MaxValue),
		MaxGasLimit: p.MaxGasLimit, MaxFeePerGas: weiText(p.MaxFeePerGas), SkipEstimate: p.SkipEstimation,
		RatePerSecond: p.RatePerSecond, Burst: p.Burst, MaxWaits: p.MaxWaits, CreatedBy: p.CreatedBy,
		NoUnlimitedApprovals: p.NoUnlimitedApprovals, TokenRecipients: addressList(p.TokenRecipients), Spenders: addressList(p.Spenders)}
	if j.Roles == nil {
		j.Roles = []Role{}
	}
	if p.SimulationAdvisory {
		j.Simulation = SimulationAdvisory
	}
	if p.AllSigners {
		j.Signers = []string{"*"}
	}
	for _, s := range p.Signers {
		j.Signers = append(j.Signers, CanonicalAddress(s))
	}
	if p.Hourly.Value != nil || p.Hourly.Count > 0 {
		j.Hourly = &limitJSON{Value: weiText(p.Hourly.Value), Count: p.Hourly.Count}
	}
	if p.Daily.Value != nil || p.Daily.Count > 0 {
		j.Daily = &limitJSON{Value: weiText(p.Daily.Value), Count: p.Daily.Count}
	}
	if p.Allowlist != nil {
		list := make([]string, len(p.Allowlist))
		for i, a := range p.Allowlist {
			list[i] = CanonicalAddress(a)
		}
		j.Allowlist = &list
	}
	for _, r := range p.Tokens {
		j.Tokens = append(j.Tokens, tokenRuleJSON{ChainID: r.ChainID, Token: CanonicalAddress(r.Token),
			MaxPerTx: weiText(r.MaxPerTx), Protected: r.Protected})
	}
	for _, w := range p.Windows {
		wj := windowJSON{Scope: w.Scope, Asset: WindowNative, ChainID: w.ChainID, Period: w.PeriodText(), MaxAmount: weiText(w.MaxAmount)}
		if !w.Native() {
			wj.Asset = CanonicalAddress(w.Token)
		}
		if w.MaxCount != 0 {
			n := w.MaxCount
			wj.MaxCount = &n
		}
		j.Windows = append(j.Windows, wj)
	}
	for _, r := range p.Approvals {
		a := approvalRuleJSON{Asset: r.Asset(), ChainID: r.ChainID, Above: weiText(r.Above), Required: r.Required,
			Approvers: r.Approvers, ApproverRole: r.ApproverRole}
		if r.ExpiresIn != 0 {
			a.ExpiresIn = r.ExpiresIn.String()
		}
		j.Approvals = append(j.Approvals, a)
	}
	if !p.CreatedAt.IsZero() {
		t := p.CreatedAt.UTC()
		j.CreatedAt = &t
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the wire form; a malformed field is a
// *ValidationError naming it.
func (p *Policy) UnmarshalJSON(b []byte) error {
	var j policyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("%w: policy: %v", ErrInvalid, err)
	}
	v := &ValidationError{}
	out := Policy{Principal: j.Principal, Version: j.Version, Roles: j.Roles, RatePerSecond: j.RatePerSecond, Burst: j.Burst,
		MaxWaits: j.MaxWaits, CreatedBy: j.CreatedBy, MaxGasLimit: j.MaxGasLimit, SkipEstimation: j.SkipEstimate,
		NoUnlimitedApprovals: j.NoUnlimitedApprovals}
	if j.CreatedAt != nil {
		out.CreatedAt = *j.CreatedAt
	}
	switch j.Simulation {
	case "", SimulationEnforce:
	case SimulationAdvisory:
		out.SimulationAdvisory = true
	default:
		v.Add("simulation", "must be %q or %q, got %q", SimulationEnforce, SimulationAdvisory, j.Simulation)
	}
	for _, s := range j.Signers {
		if s == "*" {
			out.AllSigners = true
			continue
		}
		a, err := ParseAddress(s)
		if err != nil {
			v.Add("signers", "%v", err)
			continue
		}
		out.Signers = append(out.Signers, a)
	}
	out.MaxValue = parseWei(v, "maxValue", j.MaxValue)
	out.MaxFeePerGas = parseWei(v, "maxFeePerGas", j.MaxFeePerGas)
	if j.Hourly != nil {
		out.Hourly = Limit{Value: parseWei(v, "hourly.value", j.Hourly.Value), Count: j.Hourly.Count}
	}
	if j.Daily != nil {
		out.Daily = Limit{Value: parseWei(v, "daily.value", j.Daily.Value), Count: j.Daily.Count}
	}
	if j.Allowlist != nil {
		out.Allowlist = []common.Address{}
		for _, s := range *j.Allowlist {
			a, err := ParseAddress(s)
			if err != nil {
				v.Add("allowlist", "%v", err)
				continue
			}
			out.Allowlist = append(out.Allowlist, a)
		}
	}
	for i, r := range j.Tokens {
		field := fmt.Sprintf("tokens[%d]", i)
		rule := TokenRule{ChainID: r.ChainID, Protected: r.Protected}
		rule.Token = parseListed(v, field+".token", r.Token)
		if r.MaxPerTx != "" {
			n, ok := new(big.Int).SetString(r.MaxPerTx, 10)
			if !ok || n.Sign() < 0 {
				v.Add(field+".maxPerTx", "must be a non-negative decimal number of token units, got %q", r.MaxPerTx)
			}
			rule.MaxPerTx = n
		}
		out.Tokens = append(out.Tokens, rule)
	}
	for i, wj := range j.Windows {
		out.Windows = append(out.Windows, parseWindow(v, fmt.Sprintf("windows[%d]", i), wj))
	}
	out.TokenRecipients = parseAddressList(v, "tokenRecipients", j.TokenRecipients)
	out.Spenders = parseAddressList(v, "spenders", j.Spenders)
	for i, r := range j.Approvals {
		out.Approvals = append(out.Approvals, parseApprovalRule(v, fmt.Sprintf("approvals[%d]", i), r))
	}
	if err := v.Err(); err != nil {
		return err
	}
	*p = out
	return nil
}

// parseWindow reads a window's wire form; what only the whole window can
// tell (a chain with a token, something limited) is Validate's.
func parseWindow(v *ValidationError, field string, wj windowJSON) Window {
	w := Window{Scope: wj.Scope, ChainID: wj.ChainID}
	switch wj.Asset {
	case WindowNative:
	case "":
		v.Add(field+".asset", "is required: %q or a token's address", WindowNative)
	default:
		a, err := ParseAddress(wj.Asset)
		switch {
		case err != nil:
			v.Add(field+".asset", "%q or a token's address: %v", WindowNative, err)
		case a == (common.Address{}):
			v.Add(field+".asset", "the zero address is no token: give %q for native value", WindowNative)
		}
		w.Token = a
	}
	if wj.Period == "" {
		v.Add(field+".period", "is required: %q or a duration such as 30m, 1h or 7d", WindowDay)
	} else {
		var err error
		if w.Period, w.Day, err = ParseWindowPeriod(wj.Period); err != nil {
			v.Add(field+".period", "%v", err)
		}
	}
	if wj.MaxAmount != "" {
		n, ok := new(big.Int).SetString(wj.MaxAmount, 10)
		if !ok || n.Sign() < 0 {
			v.Add(field+".maxAmount", "must be a non-negative decimal number (wei, or token units), got %q", wj.MaxAmount)
		}
		w.MaxAmount = n
	}
	if wj.MaxCount != nil {
		if *wj.MaxCount < 1 {
			v.Add(field+".maxCount", "must be at least 1 (leave it out for no cap on the count), got %d", *wj.MaxCount)
		}
		w.MaxCount = *wj.MaxCount
	}
	return w
}

// parseApprovalRule reads one approval rule; the rules between its fields
// are Validate's.
func parseApprovalRule(v *ValidationError, field string, j approvalRuleJSON) ApprovalRule {
	r := ApprovalRule{ChainID: j.ChainID, Required: j.Required, Approvers: j.Approvers, ApproverRole: j.ApproverRole}
	switch j.Asset {
	case AssetNative:
	case "":
		v.Add(field+".asset", "is required: %q or a token address", AssetNative)
	default:
		a, err := ParseAddress(j.Asset)
		if err != nil {
			v.Add(field+".asset", "must be %q or a token address: %v", AssetNative, err)
		}
		r.Token = &a
	}
	if j.Above == "" {
		v.Add(field+".above", "is required: a non-negative decimal threshold (wei, or token units)")
	} else if n, ok := new(big.Int).SetString(j.Above, 10); !ok || n.Sign() < 0 {
		v.Add(field+".above", "must be a non-negative decimal number, got %q", j.Above)
	} else {
		r.Above = n
	}
	if j.ExpiresIn != "" {
		d, err := time.ParseDuration(j.ExpiresIn)
		if err != nil || d <= 0 || d > MaxApprovalExpiry {
			v.Add(field+".expiresIn", "must be a positive duration of at most %s (such as \"1h\" or \"36h\"), got %q",
				MaxApprovalExpiry, j.ExpiresIn)
		} else {
			r.ExpiresIn = d
		}
	}
	return r
}

// addressList is a list's wire form: nil stays absent, empty stays [].
func addressList(as []common.Address) *[]string {
	if as == nil {
		return nil
	}
	list := make([]string, len(as))
	for i, a := range as {
		list[i] = CanonicalAddress(a)
	}
	return &list
}

// parseAddressList reads a list whose absence means no list (nil) and
// whose [] means an empty one; a bad entry is named by its index.
func parseAddressList(v *ValidationError, field string, list *[]string) []common.Address {
	if list == nil {
		return nil
	}
	out := make([]common.Address, 0, len(*list))
	for i, s := range *list {
		out = append(out, parseListed(v, fmt.Sprintf("%s[%d]", field, i), s))
	}
	return out
}

// parseListed reads a required address.
func parseListed(v *ValidationError, field, s string) common.Address {
	if s == "" {
		v.Add(field, "is required")
		return common.Address{}
	}
	a, err := ParseAddress(s)
	if err != nil {
		v.Add(field, "%v", err)
	}
	return a
}

func weiText(v *big.Int) string {
	if v == nil {
		return ""
	}
	return v.String()
}

func parseWei(v *ValidationError, field, s string) *big.Int {
	if s == "" {
		return nil
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || n.Sign() < 0 {
		v.Add(field, "must be a non-negative decimal number of wei, got %q", s)
		return nil
	}
	return n
}
