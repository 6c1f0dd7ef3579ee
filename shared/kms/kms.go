// Package kms is the txm.Signer adapter over Google Cloud KMS: the private
// key is an asymmetric signing key of algorithm EC_SIGN_SECP256K1_SHA256
// (which Cloud KMS offers at the HSM protection level) and never leaves the
// HSM.
//
// New asks KMS for the key version's public key once. KMS returns it as a PEM
// SubjectPublicKeyInfo; crypto/x509 does not know secp256k1, so the package
// parses the ASN.1 itself: the algorithm must be id-ecPublicKey
// (1.2.840.10045.2.1) with the named curve secp256k1 (1.3.132.0.10), and the
// subjectPublicKey BIT STRING must be the 65-byte uncompressed point, from
// which the Ethereum address is derived (Keccak-256 of the point).
//
// SignTx hashes the transaction as go-ethereum's latest signer for the chain
// does, and sends that 32-byte hash to AsymmetricSign as a precomputed SHA-256
// digest, which is how KMS accepts an externally hashed message for secp256k1
// keys. KMS answers with a DER ECDSA signature (r, s) without a recovery id
// and without low-s normalisation. The package parses the DER, replaces s by
// N−s when s > N/2 (Ethereum rejects high-s signatures), then tries both
// recovery ids v ∈ {0, 1} and keeps the one that recovers this key; a
// signature from which neither does is an error. The 65-byte [R || S || V]
// signature is attached with Transaction.WithSignature.
//
// Following Google's integrity guidance, every call is checked with CRC32C:
// the public key's pem_crc32c, the request's digest_crc32c (which KMS must
// report as verified) and the response's signature_crc32c; each response must
// also name the key version asked for. Any mismatch is an ErrChecksum error;
// nothing corrupted in transit is used.
package kms

import (
	"bytes"
	"context"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/big"
	"strings"

	"cloud.google.com/go/kms/apiv1/kmspb"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/txfence/txfence/shared/txm"
)

// Sentinel errors.
var (
	// ErrChecksum means a CRC32C check failed: the request or the response
	// was corrupted in transit. Retrying the call is safe.
	ErrChecksum = errors.New("crc32c checksum mismatch")

	// ErrAlgorithm means the key version is not EC_SIGN_SECP256K1_SHA256.
	ErrAlgorithm = errors.New("key algorithm is not EC_SIGN_SECP256K1_SHA256")

	// ErrPublicKey means the public key KMS returned is not a PEM
	// SubjectPublicKeyInfo of a secp256k1 point.
	ErrPublicKey = errors.New("malformed secp256k1 public key")

	// ErrSignature means KMS returned a signature that is malformed or does
	// not recover to the key's address.
	ErrSignature = errors.New("invalid signature")
)

// Client is the part of *kms.KeyManagementClient (cloud.google.com/go/kms/apiv1)
// the signer uses; the real client satisfies it.
type Client interface {
	GetPublicKey(ctx context.Context, req *kmspb.GetPublicKeyRequest, opts ...gax.CallOption) (*kmspb.PublicKey, error)
	AsymmetricSign(ctx context.Context, req *kmspb.AsymmetricSignRequest, opts ...gax.CallOption) (*kmspb.AsymmetricSignResponse, error)
}

var (
	oidECPublicKey = asn1.ObjectIdentifier{1, 2, 840, 10045, 2, 1}
	oidSecp256k1   = asn1.ObjectIdentifier{1, 3, 132, 0, 10}

	castagnoli = crc32.MakeTable(crc32.Castagnoli)

	secp256k1N     = crypto.S256().Params().N
	secp256k1HalfN = new(big.Int).Rsh(secp256k1N, 1)
)

// Signer signs with one Cloud KMS key version. It is safe for concurrent use.
type Signer struct {
	client Client
	name   string // full cryptoKeyVersions resource name
	pub    []byte // 65-byte uncompressed point
	addr   common.Address
}

var _ txm.Signer = (*Signer)(nil)

// New fetches and checks the public key of keyVersionName
// ("projects/P/locations/L/keyRings/R/cryptoKeys/K/cryptoKeyVersions/N") and
// returns a signer for it.
func New(ctx context.Context, client Client, keyVersionName string) (*Signer, error) {
	if client == nil {
		return nil, errors.New("new kms signer: client is required")
	}
	if !strings.Contains(keyVersionName, "/cryptoKeyVersions/") {
		return nil, fmt.Errorf("new kms signer: %q is not a crypto key version name", keyVersionName)
	}
	resp, err := client.GetPublicKey(ctx, &kmspb.GetPublicKeyRequest{Name: keyVersionName})
	if err != nil {
		return nil, fmt.Errorf("get public key: %w", err)
	}
	if resp == nil {
		return nil, errors.New("get public key: empty response")
	}
	if resp.GetName() != keyVersionName {
		return nil, fmt.Errorf("get public key: response is for %q: %w", resp.GetName(), ErrChecksum)
	}
	if c := resp.GetPemCrc32C(); c == nil || c.GetValue() != checksum([]byte(resp.GetPem())) {
		return nil, fmt.Errorf("get public key: pem: %w", ErrChecksum)
	}
	if resp.GetAlgorithm() != kmspb.CryptoKeyVersion_EC_SIGN_SECP256K1_SHA256 {
		return nil, fmt.Errorf("get public key: %s: %w", resp.GetAlgorithm(), ErrAlgorithm)
	}
	pub, err := parsePublicKey(resp.GetPem())
	if err != nil {
		return nil, fmt.Errorf("get public key: %w", err)
	}
	ecpub, err := crypto.UnmarshalPubkey(pub)
	if err != nil {
		return nil, fmt.Errorf("get public key: %w: %v", ErrPublicKey, err)
	}
	return &Signer{client: client, name: keyVersionName, pub: pub, addr: crypto.PubkeyToAddress(*ecpub)}, nil
}

// Address is the Ethereum address of the KMS key.
func (s *Signer) Address() common.Address { return s.addr }

// KeyVersionName is the Cloud KMS key version the signer uses.
func (s *Signer) KeyVersionName() string { return s.name }

// SignTx signs tx for chainID in KMS with the latest signer go-ethereum knows
// for that chain (legacy EIP-155, EIP-1559 and later types).
func (s *Signer) SignTx(ctx context.Context, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	if tx == nil || chainID == nil {
		return nil, errors.New("sign tx: transaction and chain id are required")
	}
	signer := types.LatestSignerForChainID(chainID)
	hash := signer.Hash(tx)
	sig, err := s.sign(ctx, hash[:])
	if err != nil {
		return nil, fmt.Errorf("sign tx: %w", err)
	}
	signed, err := tx.WithSignature(signer, sig)
	if err != nil {
		return nil, fmt.Errorf("sign tx: %w", err)
	}
	return signed, nil
}

// sign returns the 65-byte [R || S || V] signature of a 32-byte hash, with
// low s and V ∈ {0, 1}.
func (s *Signer) sign(ctx context.Context, hash []byte) ([]byte, error) {
	resp, err := s.client.AsymmetricSign(ctx, &kmspb.AsymmetricSignRequest{
		Name:         s.name,
		Digest:       &kmspb.Digest{Digest: &kmspb.Digest_Sha256{Sha256: hash}},
		DigestCrc32C: wrapperspb.Int64(checksum(hash)),
	})
	if err != nil {
		return nil, fmt.Errorf("asymmetric sign: %w", err)
	}
	if resp == nil {
		return nil, errors.New("asymmetric sign: empty response")
	}
	if !resp.GetVerifiedDigestCrc32C() {
		return nil, fmt.Errorf("asymmetric sign: digest not verified: %w", ErrChecksum)
	}
	if resp.GetName() != s.name {
		return nil, fmt.Errorf("asymmetric sign: response is for %q: %w", resp.GetName(), ErrChecksum)
	}
	if c := resp.GetSignatureCrc32C(); c == nil || c.GetValue() != checksum(resp.GetSignature()) {
		return nil, fmt.Errorf("asymmetric sign: signature: %w", ErrChecksum)
	}

	r, sv, err := parseDER(resp.GetSignature())
	if err != nil {
		return nil, fmt.Errorf("asymmetric sign: %w", err)
	}
	if sv.Cmp(secp256k1HalfN) > 0 {
		sv = new(big.Int).Sub(secp256k1N, sv)
	}
	sig := make([]byte, crypto.SignatureLength)
	r.FillBytes(sig[0:32])
	sv.FillBytes(sig[32:64])
	for v := byte(0); v <= 1; v++ {
		sig[crypto.RecoveryIDOffset] = v
		pub, err := crypto.Ecrecover(hash, sig)
		if err == nil && bytes.Equal(pub, s.pub) {
			return sig, nil
		}
	}
	return nil, fmt.Errorf("asymmetric sign: %w: no recovery id yields the key", ErrSignature)
}

// String shows the address and key version.
func (s *Signer) String() string { return "kms.Signer(" + s.addr.Hex() + ", " + s.name + ")" }

// LogValue logs the address, the stable identity of a signer.
func (s *Signer) LogValue() slog.Value { return slog.StringValue(s.addr.Hex()) }

// subjectPublicKeyInfo is RFC 5280's SubjectPublicKeyInfo.
type subjectPublicKeyInfo struct {
	Algorithm pkix.AlgorithmIdentifier
	PublicKey asn1.BitString
}

// parsePublicKey returns the 65-byte uncompressed secp256k1 point of a PEM
// SubjectPublicKeyInfo.
func parsePublicKey(text string) ([]byte, error) {
	block, rest := pem.Decode([]byte(text))
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%w: no PEM PUBLIC KEY block", ErrPublicKey)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%w: data after the PEM block", ErrPublicKey)
	}
	var spki subjectPublicKeyInfo
	if trailing, err := asn1.Unmarshal(block.Bytes, &spki); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPublicKey, err)
	} else if len(trailing) != 0 {
		return nil, fmt.Errorf("%w: data after SubjectPublicKeyInfo", ErrPublicKey)
	}
	if !spki.Algorithm.Algorithm.Equal(oidECPublicKey) {
		return nil, fmt.Errorf("%w: algorithm %s is not id-ecPublicKey", ErrPublicKey, spki.Algorithm.Algorithm)
	}
	var curve asn1.ObjectIdentifier
	if trailing, err := asn1.Unmarshal(spki.Algorithm.Parameters.FullBytes, &curve); err != nil || len(trailing) != 0 {
		return nil, fmt.Errorf("%w: curve parameters are not a named curve", ErrPublicKey)
	}
	if !curve.Equal(oidSecp256k1) {
		return nil, fmt.Errorf("%w: curve %s is not secp256k1", ErrPublicKey, curve)
	}
	point := spki.PublicKey.RightAlign()
	if spki.PublicKey.BitLength != 8*65 || len(point) != 65 || point[0] != 0x04 {
		return nil, fmt.Errorf("%w: want a 65-byte uncompressed point", ErrPublicKey)
	}
	return point, nil
}

// ecdsaSignature is the DER ECDSA-Sig-Value of RFC 3279.
type ecdsaSignature struct {
	R, S *big.Int
}

// parseDER returns r and s of a DER signature, each in [1, N−1].
func parseDER(der []byte) (r, s *big.Int, err error) {
	var sig ecdsaSignature
	trailing, err := asn1.Unmarshal(der, &sig)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	if len(trailing) != 0 {
		return nil, nil, fmt.Errorf("%w: data after the DER signature", ErrSignature)
	}
	for _, v := range []*big.Int{sig.R, sig.S} {
		if v == nil || v.Sign() <= 0 || v.Cmp(secp256k1N) >= 0 {
			return nil, nil, fmt.Errorf("%w: r or s out of range", ErrSignature)
		}
	}
	return sig.R, sig.S, nil
}

// checksum is the CRC32C KMS uses, as the int64 its wrappers carry.
func checksum(b []byte) int64 {
	return int64(crc32.Checksum(b, castagnoli))
}
