package evm

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/txm"
)

// insufficientItem is the Reverter's custom error as solc's ABI has it.
const insufficientItem = `{"type":"error","name":"InsufficientBalance","inputs":[
	{"name":"who","type":"address","internalType":"address"},
	{"name":"need","type":"uint256","internalType":"uint256"},
	{"name":"have","type":"uint256","internalType":"uint256"}]}`

const insufficientSig = "InsufficientBalance(address,uint256,uint256)"

// packError is an error's selector and its arguments ABI-encoded.
func packError(t testing.TB, sig string, args ...any) []byte {
	t.Helper()
	e, err := ParseErrorABI(sig)
	require.NoError(t, err)
	require.Len(t, e.byID, 1)
	for _, item := range e.byID {
		body, err := item.Inputs.Pack(args...)
		require.NoError(t, err)
		return append(crypto.Keccak256([]byte(item.Sig))[:4], body...)
	}
	return nil
}

// word is a 32-byte big-endian word.
func abiWord(v uint64) []byte { return common.BigToHash(new(big.Int).SetUint64(v)).Bytes() }

func TestDecodeRevert_Kinds(t *testing.T) {
	t.Parallel()
	who := common.HexToAddress("0x00000000000000000000000000000000000a11ce")
	custom := packError(t, insufficientSig, who, big.NewInt(10), big.NewInt(3))
	abiItem, err := ParseErrorABI(insufficientItem)
	require.NoError(t, err)
	abiSig, err := ParseErrorABI(insufficientSig)
	require.NoError(t, err)
	other, err := ParseErrorABI("Other(uint256)")
	require.NoError(t, err)
	errSel, panicSel := errorSelector[:], panicSelector[:]

	tests := []struct {
		name     string
		data     []byte
		errs     *ErrorABI
		kind     txm.RevertKind
		reason   string
		code     uint64
		errName  string
		args     []txm.RevertArg
		selector string
	}{
		{name: "no data", data: nil, kind: txm.RevertKindUnknown},
		{name: "three bytes", data: []byte{1, 2, 3}, kind: txm.RevertKindUnknown},
		{name: "error string", data: packError(t, "Error(string)", "not enough"), kind: txm.RevertKindError,
			reason: "not enough", selector: "0x08c379a0"},
		{name: "error empty string", data: packError(t, "Error(string)", ""), kind: txm.RevertKindError,
			selector: "0x08c379a0"},
		{name: "error selector alone", data: errSel, kind: txm.RevertKindUnknown},
		{name: "error offset past the end", data: cat(errSel, abiWord(1<<40)), kind: txm.RevertKindUnknown},
		{name: "error offset huge", data: cat(errSel, common.MaxHash.Bytes(), abiWord(5)), kind: txm.RevertKindUnknown},
		{name: "error length past the end", data: cat(errSel, abiWord(32), abiWord(1000), []byte("abc")),
			kind: txm.RevertKindUnknown},
		{name: "error invalid utf-8", data: packError(t, "Error(string)", "a\xffb"), kind: txm.RevertKindError,
			reason: "a\uFFFDb", selector: "0x08c379a0"},
		{name: "panic assert", data: cat(panicSel, abiWord(0x01)), kind: txm.RevertKindPanic, code: 0x01,
			reason: "assertion failed", selector: "0x4e487b71"},
		{name: "panic overflow", data: cat(panicSel, abiWord(0x11)), kind: txm.RevertKindPanic, code: 0x11,
			reason: "arithmetic overflow or underflow", selector: "0x4e487b71"},
		{name: "panic division", data: cat(panicSel, abiWord(0x12)), kind: txm.RevertKindPanic, code: 0x12,
			reason: "division or modulo by zero", selector: "0x4e487b71"},
		{name: "panic enum", data: cat(panicSel, abiWord(0x21)), kind: txm.RevertKindPanic, code: 0x21,
			reason: "conversion to an invalid enum value", selector: "0x4e487b71"},
		{name: "panic storage bytes", data: cat(panicSel, abiWord(0x22)), kind: txm.RevertKindPanic, code: 0x22,
			reason: "incorrectly encoded storage byte array", selector: "0x4e487b71"},
		{name: "panic pop", data: cat(panicSel, abiWord(0x31)), kind: txm.RevertKindPanic, code: 0x31,
			reason: "pop on an empty array", selector: "0x4e487b71"},
		{name: "panic index", data: cat(panicSel, abiWord(0x32)), kind: txm.RevertKindPanic, code: 0x32,
			reason: "array index out of bounds", selector: "0x4e487b71"},
		{name: "panic memory", data: cat(panicSel, abiWord(0x41)), kind: txm.RevertKindPanic, code: 0x41,
			reason: "too much memory allocated or an array too large", selector: "0x4e487b71"},
		{name: "panic function pointer", data: cat(panicSel, abiWord(0x51)), kind: txm.RevertKindPanic, code: 0x51,
			reason: "call to a zero-initialized internal function pointer", selector: "0x4e487b71"},
		{name: "panic unknown code", data: cat(panicSel, abiWord(0x99)), kind: txm.RevertKindPanic, code: 0x99,
			reason: "unknown panic code", selector: "0x4e487b71"},
		{name: "panic code past uint64", data: cat(panicSel, common.MaxHash.Bytes()), kind: txm.RevertKindUnknown},
		{name: "panic short", data: cat(panicSel, abiWord(0x12)[:31]), kind: txm.RevertKindUnknown},
		{name: "custom without abi", data: custom, kind: txm.RevertKindCustom, selector: "0x" + fmt.Sprintf("%x", custom[:4])},
		{name: "custom with another error's abi", data: custom, errs: other, kind: txm.RevertKindCustom,
			selector: "0x" + fmt.Sprintf("%x", custom[:4])},
		{name: "custom with json item", data: custom, errs: abiItem, kind: txm.RevertKindCustom,
			errName: "InsufficientBalance", selector: "0x" + fmt.Sprintf("%x", custom[:4]),
			reason: "InsufficientBalance(who=" + who.Hex() + ", need=10, have=3)",
			args: []txm.RevertArg{{Name: "who", Type: "address", Value: who.Hex()},
				{Name: "need", Type: "uint256", Value: "10"}, {Name: "have", Type: "uint256", Value: "3"}}},
		{name: "custom with signature", data: custom, errs: abiSig, kind: txm.RevertKindCustom,
			errName: "InsufficientBalance", selector: "0x" + fmt.Sprintf("%x", custom[:4]),
			reason: "InsufficientBalance(arg0=" + who.Hex() + ", arg1=10, arg2=3)",
			args: []txm.RevertArg{{Name: "arg0", Type: "address", Value: who.Hex()},
				{Name: "arg1", Type: "uint256", Value: "10"}, {Name: "arg2", Type: "uint256", Value: "3"}}},
		{name: "custom truncated arguments", data: custom[:40], errs: abiItem, kind: txm.RevertKindCustom,
			errName: "InsufficientBalance", selector: "0x" + fmt.Sprintf("%x", custom[:4]),
			reason: insufficientSig + ": the revert data does not decode as its arguments"},
		{name: "custom selector alone", data: custom[:4], kind: txm.RevertKindCustom,
			selector: "0x" + fmt.Sprintf("%x", custom[:4])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := DecodeRevert(tt.data, tt.errs)
			require.Equal(t, tt.kind, r.Kind)
			require.Equal(t, tt.reason, r.Reason)
			require.Equal(t, tt.code, r.PanicCode)
			require.Equal(t, tt.errName, r.Name)
			require.Equal(t, tt.args, r.Args)
			require.Equal(t, tt.selector, r.SelectorHex())
			require.Equal(t, len(tt.data), len(r.Data))
			require.NotEmpty(t, r.String())
		})
	}
}

// TestDecodeRevert_ComplexArguments: arrays, tuples, bytes, strings, bools
// and signed integers render as documented.
func TestDecodeRevert_ComplexArguments(t *testing.T) {
	t.Parallel()
	item := `{"type":"error","name":"Complex","inputs":[
		{"name":"ids","type":"uint256[]"},
		{"name":"pair","type":"tuple","components":[{"name":"to","type":"address"},{"name":"ok","type":"bool"}]},
		{"name":"blob","type":"bytes"},
		{"name":"tag","type":"bytes4"},
		{"name":"note","type":"string"},
		{"name":"delta","type":"int8"},
		{"name":"small","type":"uint16"}]}`
	errs, err := ParseErrorABI(item)
	require.NoError(t, err)
	var e abi.Error
	for _, v := range errs.byID {
		e = v
	}
	to := common.HexToAddress("0x00000000000000000000000000000000000000b0")
	pair := struct {
		To common.Address
		Ok bool
	}{to, true}
	body, err := e.Inputs.Pack([]*big.Int{big.NewInt(1), big.NewInt(2)}, pair, []byte{0xde, 0xad},
		[4]byte{1, 2, 3, 4}, "hi", int8(-5), uint16(700))
	require.NoError(t, err)
	r := DecodeRevert(append(e.ID[:4:4], body...), errs)
	require.Equal(t, txm.RevertKindCustom, r.Kind)
	got := map[string]string{}
	for _, a := range r.Args {
		got[a.Name] = a.Type + " " + a.Value
	}
	require.Equal(t, map[string]string{
		"ids":   `uint256[] ["1","2"]`,
		"pair":  `(address,bool) {"to":"` + to.Hex() + `","ok":"true"}`,
		"blob":  "bytes 0xdead",
		"tag":   "bytes4 0x01020304",
		"note":  "string hi",
		"delta": "int8 -5",
		"small": "uint16 700",
	}, got)
}

func TestParseErrorABI(t *testing.T) {
	t.Parallel()
	good := []string{
		insufficientItem,
		insufficientSig,
		"error " + insufficientSig,
		"  " + insufficientSig + "\n",
		"[" + insufficientItem + `,{"type":"function","name":"f","inputs":[],"outputs":[]}]`,
		"Empty()",
	}
	for _, s := range good {
		e, err := ParseErrorABI(s)
		require.NoError(t, err, s)
		require.NotEmpty(t, e.byID, s)
	}
	bad := map[string]string{
		"":   "empty",
		"  ": "empty",
		"{":  "not a JSON object",
		`{"type":"function","name":"f","inputs":[]}`:   `not "error"`,
		`{"name":"E","inputs":[]}`:                     `not "error"`,
		`[{"type":"function","name":"f","inputs":[]}]`: `no item of type "error"`,
		`[]`: `no item of type "error"`,
		`[{"type":"error","name":"E","inputs":[{"name":"x","type":"uint999"}]}]`: "error abi",
		`[{"type":"error"`:                   "invalid JSON",
		"InsufficientBalance(address,":       "not a signature",
		"InsufficientBalance(address,uint7)": "no ABI type uint7",
		"E(bytes33)":                         "error abi",
		"E((uint256,int4)[])":                "no ABI type int4",
		"just words":                         "not a signature",
		strings.Repeat("x", 500) + "(":       "…",
	}
	for s, want := range bad {
		_, err := ParseErrorABI(s)
		require.ErrorIs(t, err, txm.ErrInvalid, s)
		require.ErrorContains(t, err, want, s)
		require.Less(t, len(err.Error()), 400, "the error does not echo a long fragment whole")
	}
}

// dataError is a JSON-RPC error as go-ethereum's rpc client returns it.
type dataError struct {
	code int
	msg  string
	data any
}

func (e *dataError) Error() string          { return e.msg }
func (e *dataError) ErrorCode() int         { return e.code }
func (e *dataError) ErrorData() interface{} { return e.data }

func TestRevertData(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want []byte
		ok   bool
	}{
		{"geth hex", &dataError{3, "execution reverted", "0x08c379a0"}, []byte{0x08, 0xc3, 0x79, 0xa0}, true},
		{"wrapped", fmt.Errorf("call: %w", &dataError{3, "execution reverted", "0x0102"}), []byte{1, 2}, true},
		{"empty revert", &dataError{3, "execution reverted", "0x"}, []byte{}, true},
		{"no prefix", &dataError{3, "execution reverted", "0102"}, []byte{1, 2}, true},
		{"reverted prefix", &dataError{-32015, "VM execution error.", "Reverted 0x0102"}, []byte{1, 2}, true},
		{"nested", &dataError{3, "execution reverted", map[string]any{"data": "0x0102"}}, []byte{1, 2}, true},
		{"odd hex", &dataError{3, "execution reverted", "0x010"}, nil, false},
		{"not hex", &dataError{3, "execution reverted", "oops"}, nil, false},
		{"number", &dataError{3, "execution reverted", 12.0}, nil, false},
		{"nil data", &dataError{3, "execution reverted", nil}, nil, false},
		{"plain error", errors.New("execution reverted"), nil, false},
		{"nil", nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := RevertData(tt.err)
			require.Equal(t, tt.ok, ok)
			if tt.ok {
				require.Equal(t, tt.want, got)
			}
		})
	}
}

func TestDecodeRevertError(t *testing.T) {
	t.Parallel()
	data := packError(t, "Error(string)", "nope")
	r, ok := DecodeRevertError(fmt.Errorf("call: %w",
		&dataError{3, "execution reverted: nope", fmt.Sprintf("0x%x", data)}), nil)
	require.True(t, ok)
	require.Equal(t, txm.RevertKindError, r.Kind)
	require.Equal(t, "nope", r.Reason)

	r, ok = DecodeRevertError(&dataError{3, "execution reverted", nil}, nil)
	require.True(t, ok)
	require.Equal(t, txm.RevertKindUnknown, r.Kind)
	require.Equal(t, "no reason given", r.String())

	_, ok = DecodeRevertError(&dataError{-32000, "nonce too low", nil}, nil)
	require.False(t, ok)
	_, ok = DecodeRevertError(context.DeadlineExceeded, nil)
	require.False(t, ok)
}

// FuzzDecodeRevert: DecodeRevert never panics, whatever the data, with and
// without an ABI whose error has dynamic, nested and fixed arguments and
// whose selector the fuzzer is given; what it answers is consistent with
// the kind.
func FuzzDecodeRevert(f *testing.F) {
	const item = `[{"type":"error","name":"E","inputs":[{"name":"a","type":"uint256[]"},
		{"name":"t","type":"tuple","components":[{"name":"s","type":"string"},{"name":"b","type":"bytes"}]},
		{"name":"f","type":"bytes32[2]"},{"name":"x","type":"int64"}]},` + insufficientItem + `]`
	errs, err := ParseErrorABI(item)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range errs.byID {
		f.Add(e.ID[:4])
		f.Add(cat(e.ID[:4], abiWord(32), abiWord(1<<62)))
	}
	f.Add([]byte{})
	f.Add(errorSelector[:])
	f.Add(cat(errorSelector[:], abiWord(32), abiWord(3), []byte("abc")))
	f.Add(cat(errorSelector[:], abiWord(1<<63), abiWord(3)))
	f.Add(cat(panicSelector[:], abiWord(0x12)))
	f.Add(cat(panicSelector[:], common.MaxHash.Bytes()))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, with := range []*ErrorABI{nil, errs} {
			r := DecodeRevert(data, with)
			if string(r.Data) != string(data) || (len(data) == 0) != (r.Data == nil) {
				t.Fatalf("data not kept")
			}
			switch r.Kind {
			case txm.RevertKindUnknown:
				if r.Reason != "" || r.Name != "" || r.Args != nil {
					t.Fatalf("unknown with %+v", r)
				}
			case txm.RevertKindError:
				if [4]byte(data[:4]) != errorSelector {
					t.Fatalf("error kind for selector %x", data[:4])
				}
			case txm.RevertKindPanic:
				if [4]byte(data[:4]) != panicSelector || r.Reason != PanicMeaning(r.PanicCode) {
					t.Fatalf("panic %+v", r)
				}
			case txm.RevertKindCustom:
				if r.Selector != [4]byte(data[:4]) {
					t.Fatalf("custom selector %x for data %x", r.Selector, data[:4])
				}
				if r.Args != nil && (with == nil || len(r.Args) != len(with.byID[r.Selector].Inputs)) {
					t.Fatalf("custom args %+v", r.Args)
				}
			default:
				t.Fatalf("kind %q", r.Kind)
			}
			_ = r.String()
		}
	})
}

// TestIssue47_RevertKinds: the Reverter on the simulated chain, called with
// eth_call over its JSON-RPC URL; each revert's data, read from the node's
// error, decodes to its kind: Error(string)'s reason, Panic(uint256)'s code
// and meaning, the custom error's selector and, with its ABI given as a JSON
// item or as a signature, its arguments; a revert without data is unknown.
// The gas estimate's revert carries the same data.
func TestIssue47_RevertKinds(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	reverter := evmtest.Reverter()
	addr := e.chain.MustDeploy(t, e.keys[0], reverter)
	ec, err := ethclient.DialContext(ctx, e.chain.URL)
	require.NoError(t, err)
	t.Cleanup(ec.Close)

	// revertOf calls method and decodes the revert from the node's error.
	revertOf := func(t *testing.T, errs *ErrorABI, method string, args ...any) txm.Revert {
		t.Helper()
		data, err := reverter.Pack(method, args...)
		require.NoError(t, err)
		_, err = ec.CallContract(ctx, ethereum.CallMsg{From: e.keys[1].Address, To: &addr, Data: data}, nil)
		require.Error(t, err)
		raw, ok := RevertData(err)
		require.True(t, ok, "the node's error carries revert data: %v", err)
		r := DecodeRevert(raw, errs)
		viaErr, ok := DecodeRevertError(err, errs)
		require.True(t, ok)
		require.Equal(t, r, viaErr)

		// The estimate reverts with the same data.
		_, err = e.client.EstimateGas(ctx, txm.CallMsg{From: e.keys[1].Address, To: &addr, Data: data})
		var re *txm.RevertError
		require.ErrorAs(t, err, &re)
		require.Equal(t, len(raw), len(re.Data))
		return r
	}

	t.Run("Error(string)", func(t *testing.T) {
		r := revertOf(t, nil, "failWithReason")
		require.Equal(t, txm.RevertKindError, r.Kind)
		require.Equal(t, "Reverter: no reason to go on", r.Reason)
		require.Equal(t, "0x08c379a0", r.SelectorHex())
	})

	t.Run("Panic(uint256)", func(t *testing.T) {
		r := revertOf(t, nil, "failWithPanic", big.NewInt(0))
		require.Equal(t, txm.RevertKindPanic, r.Kind)
		require.EqualValues(t, 0x12, r.PanicCode)
		require.Equal(t, "division or modulo by zero", r.Reason)
		require.Equal(t, "panic 0x12: division or modulo by zero", r.String())
	})

	t.Run("custom", func(t *testing.T) {
		selector := "0x" + fmt.Sprintf("%x", crypto.Keccak256([]byte(insufficientSig))[:4])
		r := revertOf(t, nil, "failWithCustom", big.NewInt(42))
		require.Equal(t, txm.RevertKindCustom, r.Kind)
		require.Equal(t, selector, r.SelectorHex())
		id := reverter.ABI.Errors["InsufficientBalance"].ID
		require.Equal(t, id[:4], r.Selector[:])
		require.Empty(t, r.Args)

		for _, fragment := range []string{insufficientItem, insufficientSig} {
			errs, err := ParseErrorABI(fragment)
			require.NoError(t, err)
			r := revertOf(t, errs, "failWithCustom", big.NewInt(42))
			require.Equal(t, txm.RevertKindCustom, r.Kind)
			require.Equal(t, selector, r.SelectorHex())
			require.Equal(t, "InsufficientBalance", r.Name)
			require.Len(t, r.Args, 3)
			require.Equal(t, e.keys[1].Address.Hex(), r.Args[0].Value)
			require.Equal(t, "42", r.Args[1].Value)
			require.Equal(t, "0", r.Args[2].Value)
			require.Equal(t, []string{"address", "uint256", "uint256"},
				[]string{r.Args[0].Type, r.Args[1].Type, r.Args[2].Type})
		}
	})

	t.Run("no data", func(t *testing.T) {
		r := revertOf(t, nil, "failWithoutData")
		require.Equal(t, txm.RevertKindUnknown, r.Kind)
		require.Empty(t, r.Data)
		require.Equal(t, "no reason given", r.String())
	})
}
