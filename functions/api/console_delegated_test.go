package api_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/assert"

	"github.com/txfence/txfence/functions/internal/browsertest"
	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue48_ConsoleMarksDelegated: the console's signer page marks a
// signer whose account carries an EIP-7702 delegation, and not another.
func TestIssue48_ConsoleMarksDelegated(t *testing.T) {
	keys := evmtest.DevKeys(2)
	delegated, plain := keys[0].Address, keys[1].Address
	w := stacktest.NewWorldWithAlloc(t, 2, func(alloc types.GenesisAlloc) {
		acct := alloc[delegated]
		acct.Code = append(append([]byte{}, txm.DelegationDesignator...), common.HexToAddress("0x000000000000000000000000000000000000bEEF").Bytes()...)
		alloc[delegated] = acct
	}, keyed)
	a := w.Node(t, "a")
	reader := w.APIKey(t, txm.Policy{Principal: "ops@example.com", Roles: []txm.Role{txm.RoleReader}, AllSigners: true})

	ctx := browsertest.New(t)
	signIn(t, ctx, a.APIURL, reader)
	for _, c := range []struct {
		signer common.Address
		want   string
	}{{delegated, "1"}, {plain, "0"}} {
		browsertest.Run(t, ctx, 5*time.Second, chromedp.Evaluate(`location.hash = '#/signer/`+"1337/"+txm.CanonicalAddress(c.signer)+`'`, nil))
		browsertest.Poll(t, ctx, "the signer page to say whether it is delegated",
			`document.querySelector('#signer-body dd[data-delegated]')?.dataset.delegated === '`+c.want+`' && document.getElementById('signer-delegated') !== null`, 15*time.Second)
		text := browsertest.Eval[string](t, ctx, `document.getElementById('signer-delegated').textContent`)
		if c.want == "1" {
			assert.Contains(t, text, "EIP-7702 delegated")
		} else {
			assert.Equal(t, "none", text)
		}
	}
}
