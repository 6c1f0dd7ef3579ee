package txm

import (
	"encoding/json"
	"errors"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"
)

func TestIssue47_EffectJSON(t *testing.T) {
	t.Parallel()
	token := common.HexToAddress("0x00000000000000000000000000000000000070C0")
	from := common.HexToAddress("0xAbCdEf000000000000000000000000000000F00D")
	to := common.HexToAddress("0x000000000000000000000000000000000000bEEF")
	big1e30, _ := new(big.Int).SetString("1000000000000000000000000000000", 10)
	tests := []struct {
		effect Effect
		wire   string
	}{
		{Effect{Kind: EffectNative, From: from, To: to, Amount: big1e30},
			`{"kind":"native","from":"0xabcdef000000000000000000000000000000f00d","to":"0x000000000000000000000000000000000000beef","amount":"1000000000000000000000000000000"}`},
		{Effect{Kind: EffectERC20Transfer, Token: token, From: from, To: to, Amount: big.NewInt(5)},
			`{"kind":"erc20_transfer","token":"0x00000000000000000000000000000000000070c0","from":"0xabcdef000000000000000000000000000000f00d","to":"0x000000000000000000000000000000000000beef","amount":"5"}`},
		{Effect{Kind: EffectERC20Approval, Token: token, From: from, To: to, Amount: big.NewInt(0)},
			`{"kind":"erc20_approval","token":"0x00000000000000000000000000000000000070c0","from":"0xabcdef000000000000000000000000000000f00d","to":"0x000000000000000000000000000000000000beef","amount":"0"}`},
		{Effect{Kind: EffectERC721Transfer, Token: token, From: from, To: to, Amount: big.NewInt(1), TokenID: big.NewInt(42)},
			`{"kind":"erc721_transfer","token":"0x00000000000000000000000000000000000070c0","from":"0xabcdef000000000000000000000000000000f00d","to":"0x000000000000000000000000000000000000beef","amount":"1","tokenId":"42"}`},
		{Effect{Kind: EffectERC721Approval, Token: token, From: from, To: to, Amount: big.NewInt(1), TokenID: big.NewInt(0)},
			`{"kind":"erc721_approval","token":"0x00000000000000000000000000000000000070c0","from":"0xabcdef000000000000000000000000000000f00d","to":"0x000000000000000000000000000000000000beef","amount":"1","tokenId":"0"}`},
		{Effect{Kind: EffectApprovalForAll, Token: token, From: from, To: to, Amount: big.NewInt(1)},
			`{"kind":"approval_for_all","token":"0x00000000000000000000000000000000000070c0","from":"0xabcdef000000000000000000000000000000f00d","to":"0x000000000000000000000000000000000000beef","amount":"1"}`},
		{Effect{Kind: EffectERC1155Transfer, Token: token, From: from, To: to, Amount: big.NewInt(300), TokenID: big.NewInt(5)},
			`{"kind":"erc1155_transfer","token":"0x00000000000000000000000000000000000070c0","from":"0xabcdef000000000000000000000000000000f00d","to":"0x000000000000000000000000000000000000beef","amount":"300","tokenId":"5"}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.effect)
		require.NoError(t, err)
		require.JSONEq(t, tt.wire, string(b))
		require.Equal(t, tt.wire, string(b), "field order is stable")
		var back Effect
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, tt.effect, back)
	}

	_, err := json.Marshal(Effect{Kind: "erc777_send", Amount: big.NewInt(1)})
	require.Error(t, err, "an unknown kind does not encode")

	for _, bad := range []string{
		`{"kind":"erc777_send","from":"0x000000000000000000000000000000000000beef","to":"0x000000000000000000000000000000000000beef","amount":"1"}`,
		`{"kind":"native","token":"0x00000000000000000000000000000000000070c0","from":"0x000000000000000000000000000000000000beef","to":"0x000000000000000000000000000000000000beef","amount":"1"}`,
		`{"kind":"erc20_transfer","from":"0x000000000000000000000000000000000000beef","to":"0x000000000000000000000000000000000000beef","amount":"1"}`,
		`{"kind":"native","from":"beef","to":"0x000000000000000000000000000000000000beef","amount":"1"}`,
		`{"kind":"native","from":"0x000000000000000000000000000000000000beef","to":"0x000000000000000000000000000000000000beef","amount":"-1"}`,
		`{"kind":"native","from":"0x000000000000000000000000000000000000beef","to":"0x000000000000000000000000000000000000beef","amount":"01"}`,
		`{"kind":"native","from":"0x000000000000000000000000000000000000beef","to":"0x000000000000000000000000000000000000beef"}`,
		`{"kind":"erc721_transfer","token":"0x00000000000000000000000000000000000070c0","from":"0x000000000000000000000000000000000000beef","to":"0x000000000000000000000000000000000000beef","amount":"1"}`,
		`{"kind":"erc20_transfer","token":"0x00000000000000000000000000000000000070c0","from":"0x000000000000000000000000000000000000beef","to":"0x000000000000000000000000000000000000beef","amount":"1","tokenId":"3"}`,
		`[]`,
	} {
		var e Effect
		err := json.Unmarshal([]byte(bad), &e)
		require.Error(t, err, bad)
		require.True(t, errors.Is(err, ErrInvalid), "%s: %v", bad, err)
		require.Equal(t, Effect{}, e, "a rejected effect changes nothing")
	}
}
