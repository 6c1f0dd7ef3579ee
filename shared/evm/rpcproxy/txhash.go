package rpcproxy

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
)

// TxHashOf returns the hash of the signed transaction in the params of an
// eth_sendRawTransaction call, for use in a Before hook.
func TxHashOf(params json.RawMessage) (common.Hash, error) {
	var args []json.RawMessage
	if err := json.Unmarshal(params, &args); err != nil {
		return common.Hash{}, fmt.Errorf("decode raw tx params: %w", err)
	}
	if len(args) == 0 {
		return common.Hash{}, errors.New("decode raw tx params: no transaction")
	}
	var raw hexutil.Bytes
	if err := json.Unmarshal(args[0], &raw); err != nil {
		return common.Hash{}, fmt.Errorf("decode raw tx params: %w", err)
	}
	var tx types.Transaction
	if err := tx.UnmarshalBinary(raw); err != nil {
		return common.Hash{}, fmt.Errorf("decode raw tx: %w", err)
	}
	return tx.Hash(), nil
}
