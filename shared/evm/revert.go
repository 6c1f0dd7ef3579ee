package evm

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/txfence/txfence/shared/txm"
)

// The selectors Solidity reverts with on its own: require/revert with a
// message, and a panic.
var (
	errorSelector = [4]byte(crypto.Keccak256([]byte("Error(string)"))[:4])
	panicSelector = [4]byte(crypto.Keccak256([]byte("Panic(uint256)"))[:4])
)

// errorArgs is Error(string)'s one argument.
var errorArgs = abi.Arguments{{Type: mustType("string")}}

func mustType(t string) abi.Type {
	typ, err := abi.NewType(t, "", nil)
	if err != nil {
		panic(fmt.Sprintf("evm: abi type %s: %v", t, err))
	}
	return typ
}

// panicMeanings are Solidity's panic codes, as its documentation lists them.
var panicMeanings = map[uint64]string{
	0x00: "generic compiler-inserted panic",
	0x01: "assertion failed",
	0x11: "arithmetic overflow or underflow",
	0x12: "division or modulo by zero",
	0x21: "conversion to an invalid enum value",
	0x22: "incorrectly encoded storage byte array",
	0x31: "pop on an empty array",
	0x32: "array index out of bounds",
	0x41: "too much memory allocated or an array too large",
	0x51: "call to a zero-initialized internal function pointer",
}

// PanicMeaning is what a Solidity Panic(uint256) code means; "unknown panic
// code" for a code Solidity does not use.
func PanicMeaning(code uint64) string {
	if m, ok := panicMeanings[code]; ok {
		return m
	}
	return "unknown panic code"
}

// ErrorABI is a set of custom errors, by selector, that DecodeRevert decodes
// the arguments of. The zero value and nil hold none.
type ErrorABI struct {
	byID map[[4]byte]abi.Error
}

// ParseErrorABI reads the custom errors a caller describes, in one of three
// forms:
//
//   - a JSON ABI error item, as solc writes it:
//     {"type":"error","name":"InsufficientBalance","inputs":[{"name":"who","type":"address"},...]};
//   - a JSON ABI (an array), of which the error items are taken and the
//     rest ignored, so a contract's whole ABI may be given;
//   - a signature of canonical types, as the selector is computed from:
//     InsufficientBalance(address,uint256,uint256), with or without a
//     leading "error ". It carries no parameter names: the arguments are
//     named arg0, arg1, ...
//
// Anything else, or an ABI with no error in it, is an error matching
// txm.ErrInvalid that says what is wrong.
func ParseErrorABI(fragment string) (*ErrorABI, error) {
	s := strings.TrimSpace(fragment)
	var items json.RawMessage
	switch {
	case s == "":
		return nil, fmt.Errorf("%w: error abi: empty", txm.ErrInvalid)
	case s[0] == '[':
		items = json.RawMessage(s)
	case s[0] == '{':
		var item struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal([]byte(s), &item); err != nil {
			return nil, fmt.Errorf("%w: error abi: not a JSON object: %s", txm.ErrInvalid, jsonProblem(err))
		}
		if item.Type != "error" {
			return nil, fmt.Errorf("%w: error abi: the item's type is %q, not \"error\"", txm.ErrInvalid, item.Type)
		}
		items = json.RawMessage("[" + s + "]")
	default:
		sel, err := abi.ParseSelector(strings.TrimSpace(strings.TrimPrefix(s, "error ")))
		if err != nil {
			return nil, fmt.Errorf("%w: error abi: not a signature such as Name(address,uint256): %q",
				txm.ErrInvalid, truncate(s, 100))
		}
		sel.Type = "error"
		for i := range sel.Inputs {
			sel.Inputs[i].Name = "" // abi.NewError names them arg0, arg1, ...
		}
		b, err := json.Marshal([]abi.SelectorMarshaling{sel})
		if err != nil {
			return nil, fmt.Errorf("%w: error abi: %v", txm.ErrInvalid, err)
		}
		items = b
	}
	parsed, err := abi.JSON(bytes.NewReader(items))
	if err != nil {
		return nil, fmt.Errorf("%w: error abi: %s", txm.ErrInvalid, jsonProblem(err))
	}
	if len(parsed.Errors) == 0 {
		return nil, fmt.Errorf("%w: error abi: no item of type \"error\"", txm.ErrInvalid)
	}
	e := &ErrorABI{byID: make(map[[4]byte]abi.Error, len(parsed.Errors))}
	for _, item := range parsed.Errors {
		for _, in := range item.Inputs {
			if err := checkType(in.Type); err != nil {
				return nil, fmt.Errorf("%w: error abi: %s: %v", txm.ErrInvalid, truncate(item.Name, 100), err)
			}
		}
		e.byID[[4]byte(item.ID[:4])] = item
	}
	return e, nil
}

// checkType refuses the sizes go-ethereum's parser lets through but the ABI
// has no such type for (uint7, bytes33): their selector matches no error.
func checkType(t abi.Type) error {
	switch t.T {
	case abi.IntTy, abi.UintTy:
		if t.Size < 8 || t.Size > 256 || t.Size%8 != 0 {
			return fmt.Errorf("no ABI type %s", t)
		}
	case abi.FixedBytesTy:
		if t.Size < 1 || t.Size > 32 {
			return fmt.Errorf("no ABI type %s", t)
		}
	case abi.SliceTy, abi.ArrayTy:
		return checkType(*t.Elem)
	case abi.TupleTy:
		for _, et := range t.TupleElems {
			if err := checkType(*et); err != nil {
				return err
			}
		}
	}
	return nil
}

// jsonProblem is a JSON or ABI error's text without the input it was given.
func jsonProblem(err error) string {
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Sprintf("invalid JSON at byte %d", syntax.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "invalid JSON: it ends early"
	}
	return truncate(err.Error(), 200)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// DecodeRevert reads revert data as Error(string), Panic(uint256) or a
// custom error (txm.RevertKindCustom with its selector); the arguments of a
// custom error are decoded when errs (which may be nil) has its selector.
// Data too short or malformed for what its selector says is
// txm.RevertKindUnknown, as is no data; a custom error whose data does not
// decode with its ABI keeps its name and selector without arguments. It
// never fails: the data is the chain's, whatever it holds.
func DecodeRevert(data []byte, errs *ErrorABI) txm.Revert {
	r := txm.Revert{Kind: txm.RevertKindUnknown}
	if len(data) > 0 {
		r.Data = bytes.Clone(data)
	}
	if len(data) < 4 {
		return r
	}
	sel, body := [4]byte(data[:4]), data[4:]
	switch sel {
	case errorSelector:
		vals, err := errorArgs.Unpack(body)
		if err != nil || len(vals) != 1 {
			return r
		}
		reason, ok := vals[0].(string)
		if !ok {
			return r
		}
		r.Kind, r.Selector, r.Reason = txm.RevertKindError, sel, strings.ToValidUTF8(reason, "\uFFFD")
	case panicSelector:
		if len(body) < 32 {
			return r
		}
		code := new(big.Int).SetBytes(body[:32])
		if !code.IsUint64() {
			return r
		}
		r.Kind, r.Selector, r.PanicCode = txm.RevertKindPanic, sel, code.Uint64()
		r.Reason = PanicMeaning(r.PanicCode)
	default:
		r.Kind, r.Selector = txm.RevertKindCustom, sel
		if errs == nil {
			return r
		}
		e, ok := errs.byID[sel]
		if !ok {
			return r
		}
		r.Name = e.Name
		args, err := decodeArgs(e, body)
		if err != nil {
			r.Reason = e.Sig + ": the revert data does not decode as its arguments"
			return r
		}
		r.Args = args
		parts := make([]string, len(args))
		for i, a := range args {
			parts[i] = a.Name + "=" + a.Value
		}
		r.Reason = e.Name + "(" + strings.Join(parts, ", ") + ")"
	}
	return r
}

// decodeArgs unpacks a custom error's arguments and renders each as text.
func decodeArgs(e abi.Error, body []byte) (args []txm.RevertArg, err error) {
	vals, err := e.Inputs.Unpack(body)
	if err != nil {
		return nil, err
	}
	if len(vals) != len(e.Inputs) {
		return nil, fmt.Errorf("%d values for %d arguments", len(vals), len(e.Inputs))
	}
	args = make([]txm.RevertArg, len(vals))
	for i, in := range e.Inputs {
		text, err := argText(in.Type, reflect.ValueOf(vals[i]))
		if err != nil {
			return nil, err
		}
		args[i] = txm.RevertArg{Name: in.Name, Type: in.Type.String(), Value: text}
	}
	return args, nil
}

// argText renders a decoded value: scalars as text, arrays and tuples as
// JSON (argJSON).
func argText(t abi.Type, v reflect.Value) (string, error) {
	switch t.T {
	case abi.SliceTy, abi.ArrayTy, abi.TupleTy:
		b, err := argJSON(t, v)
		return string(b), err
	}
	return scalarText(t, v)
}

// argJSON is a value as JSON: an array's elements and a tuple's fields (an
// object by field name) each by their own text.
func argJSON(t abi.Type, v reflect.Value) (json.RawMessage, error) {
	switch t.T {
	case abi.SliceTy, abi.ArrayTy:
		if v.Kind() != reflect.Slice && v.Kind() != reflect.Array {
			return nil, fmt.Errorf("%s decoded as %s", t, v.Kind())
		}
		elems := make([]json.RawMessage, v.Len())
		for i := range elems {
			b, err := argJSON(*t.Elem, v.Index(i))
			if err != nil {
				return nil, err
			}
			elems[i] = b
		}
		return json.Marshal(elems)
	case abi.TupleTy:
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct || v.NumField() != len(t.TupleElems) {
			return nil, fmt.Errorf("%s decoded as %s", t, v.Kind())
		}
		var b strings.Builder
		b.WriteByte('{')
		for i, et := range t.TupleElems {
			fb, err := argJSON(*et, v.Field(i))
			if err != nil {
				return nil, err
			}
			key, _ := json.Marshal(t.TupleRawNames[i])
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(key)
			b.WriteByte(':')
			b.Write(fb)
		}
		b.WriteByte('}')
		return json.RawMessage(b.String()), nil
	}
	s, err := scalarText(t, v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

// scalarText is one value of a scalar ABI type as text.
func scalarText(t abi.Type, v reflect.Value) (string, error) {
	if !v.IsValid() {
		return "", fmt.Errorf("%s decoded as nothing", t)
	}
	switch t.T {
	case abi.IntTy, abi.UintTy:
		if b, ok := v.Interface().(*big.Int); ok && b != nil {
			return b.String(), nil
		}
		switch v.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			return strconv.FormatInt(v.Int(), 10), nil
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			return strconv.FormatUint(v.Uint(), 10), nil
		}
	case abi.BoolTy:
		if v.Kind() == reflect.Bool {
			return strconv.FormatBool(v.Bool()), nil
		}
	case abi.StringTy:
		if v.Kind() == reflect.String {
			return strings.ToValidUTF8(v.String(), "\uFFFD"), nil
		}
	case abi.AddressTy:
		if a, ok := v.Interface().(common.Address); ok {
			return a.Hex(), nil
		}
	case abi.BytesTy, abi.FixedBytesTy, abi.FunctionTy, abi.HashTy, abi.FixedPointTy:
		if v.Kind() == reflect.Slice || v.Kind() == reflect.Array {
			b := make([]byte, v.Len())
			for i := range b {
				b[i] = byte(v.Index(i).Uint())
			}
			return "0x" + hex.EncodeToString(b), nil
		}
	}
	return "", fmt.Errorf("%s decoded as %s", t, v.Type())
}

// RevertData is the revert data a node sent with a JSON-RPC error of
// eth_call or eth_estimateGas: geth (and nodes that follow it) put it in the
// error's data member as a hex string; a few nest it as {"data": "0x..."}
// or prefix it with "Reverted ". ok is false when err carries no such data;
// a revert without data (revert()) gives ok and no bytes.
func RevertData(err error) (data []byte, ok bool) {
	var de rpc.DataError
	if !errors.As(err, &de) {
		return nil, false
	}
	switch d := de.ErrorData().(type) {
	case string:
		return hexData(d)
	case map[string]any:
		if s, ok := d["data"].(string); ok {
			return hexData(s)
		}
	}
	return nil, false
}

// hexData decodes hex revert data, 0x-prefixed or not.
func hexData(s string) ([]byte, bool) {
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "Reverted "))
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s = s[2:]
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, false
	}
	return b, true
}

// DecodeRevertError is DecodeRevert of the data of a node's answer that a
// call reverted (JSON-RPC code 3, or an error ClassifyBroadcast reads as a
// revert); ok is false for any other error. A revert whose data the node did
// not send is txm.RevertKindUnknown.
func DecodeRevertError(err error, errs *ErrorABI) (r txm.Revert, ok bool) {
	re := revertError(err)
	if re == nil {
		return txm.Revert{}, false
	}
	return DecodeRevert(re.Data, errs), true
}

var _ txm.RevertDecoder = (*Client)(nil)

// DecodeRevert implements txm.RevertDecoder: ParseErrorABI of errorABI (when
// given), then DecodeRevert of data.
func (c *Client) DecodeRevert(data []byte, errorABI string) (txm.Revert, error) {
	var errs *ErrorABI
	if errorABI != "" {
		var err error
		if errs, err = ParseErrorABI(errorABI); err != nil {
			return txm.Revert{}, err
		}
	}
	return DecodeRevert(data, errs), nil
}
