package deps

import (
	"context"
	"fmt"
	"os"
	"strings"

	kmsapi "cloud.google.com/go/kms/apiv1"
	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/kms"
	"github.com/txfence/txfence/shared/localkey"
	"github.com/txfence/txfence/shared/txm"
)

// Signers resolves every configured signer's key reference, once, and
// checks that each key belongs to the address it is configured for. Only the
// functions that sign call it.
func (p *Process) Signers(ctx context.Context) (map[common.Address]txm.Signer, error) {
	p.signersMu.Lock()
	defer p.signersMu.Unlock()
	if p.signers != nil {
		return p.signers, nil
	}
	out, err := resolveSigners(ctx, p.Config.Signers, func() (kms.Client, error) {
		if p.kms == nil {
			c, err := kmsapi.NewKeyManagementClient(ctx)
			if err != nil {
				return nil, fmt.Errorf("kms client: %w", err)
			}
			p.kms = c
		}
		return p.kms, nil
	})
	if err != nil {
		return nil, err
	}
	p.signers = out
	return out, nil
}

func resolveSigners(ctx context.Context, cfg []config.Signer, kmsClient func() (kms.Client, error)) (map[common.Address]txm.Signer, error) {
	out := map[common.Address]txm.Signer{}
	for _, s := range cfg {
		var signer txm.Signer
		var err error
		switch ref := s.KeyRef; {
		case ref == "":
			continue // an address this process does not sign for
		case strings.HasPrefix(ref, "local:env:"):
			signer, err = localkey.FromEnv(os.LookupEnv, strings.TrimPrefix(ref, "local:env:"))
		case strings.HasPrefix(ref, "local:file:"):
			signer, err = localkey.FromFile(strings.TrimPrefix(ref, "local:file:"))
		case strings.HasPrefix(ref, "kms:"):
			var c kms.Client
			if c, err = kmsClient(); err == nil {
				signer, err = kms.New(ctx, c, strings.TrimPrefix(ref, "kms:"))
			}
		default:
			err = fmt.Errorf("unknown key reference scheme")
		}
		if err != nil {
			return nil, fmt.Errorf("signer %s: %w", txm.CanonicalAddress(s.Address), err)
		}
		if signer.Address() != s.Address {
			return nil, fmt.Errorf("signer %s: its key belongs to %s", txm.CanonicalAddress(s.Address), txm.CanonicalAddress(signer.Address()))
		}
		out[s.Address] = signer
	}
	return out, nil
}
