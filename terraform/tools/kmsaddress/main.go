// Command kmsaddress prints the Ethereum address of Cloud KMS secp256k1 key
// versions, in the form the terraform `signers` variable and
// TXFENCE_SIGNERS take. It resolves each key exactly as the Submit function
// does (shared/kms.New: public key fetched with CRC32C checks, algorithm
// EC_SIGN_SECP256K1_SHA256 required), so a key it prints is a key Submit
// can use. It needs Application Default Credentials allowed to view the
// public keys (roles/cloudkms.publicKeyViewer).
//
//	go run ./terraform/tools/kmsaddress $(terraform -chdir=terraform output -json signer_key_versions | jq -r '.[]')
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	kmsapi "cloud.google.com/go/kms/apiv1"

	"github.com/txfence/txfence/shared/kms"
	"github.com/txfence/txfence/shared/txm"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kmsaddress projects/P/locations/L/keyRings/R/cryptoKeys/K/cryptoKeyVersions/N ...")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := kmsapi.NewKeyManagementClient(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kmsaddress:", err)
		os.Exit(1)
	}
	defer client.Close()
	failed := false
	for _, name := range os.Args[1:] {
		s, err := kms.New(ctx, client, name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kmsaddress: %s: %v\n", name, err)
			failed = true
			continue
		}
		// HCL for terraform.tfvars, one object per key.
		fmt.Printf("  { address = %q, kms_key_version = %q },\n", txm.CanonicalAddress(s.Address()), s.KeyVersionName())
	}
	if failed {
		os.Exit(1)
	}
}
