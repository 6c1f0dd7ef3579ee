package kms

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	kmsapi "cloud.google.com/go/kms/apiv1"
	"cloud.google.com/go/kms/apiv1/kmspb"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/params"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/txfence/txfence/shared/localkey"
)

const keyName = "projects/p/locations/global/keyRings/r/cryptoKeys/k/cryptoKeyVersions/1"

// highSMode says which signatures the fake KMS returns with s replaced by N−s.
type highSMode int

const (
	highSAlternate highSMode = iota // every other signature
	highSAlways
	highSNever
)

// fakeKMS is an in-process Cloud KMS holding one real secp256k1 key version.
// Knobs let a test corrupt exactly one thing.
type fakeKMS struct {
	kmspb.UnimplementedKeyManagementServiceServer

	mu        sync.Mutex
	key       *ecdsa.PrivateKey // signs
	pem       string            // served public key
	algorithm kmspb.CryptoKeyVersion_CryptoKeyVersionAlgorithm
	highS     highSMode

	badPEMCRC, badSigCRC, unverifiedDigest, wrongName bool
	mangleSig                                         func([]byte) []byte

	signs, highSServed int
}

func (f *fakeKMS) GetPublicKey(_ context.Context, req *kmspb.GetPublicKeyRequest) (*kmspb.PublicKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetName() != keyName {
		return nil, status.Errorf(codes.NotFound, "no key version %s", req.GetName())
	}
	crc := checksum([]byte(f.pem))
	if f.badPEMCRC {
		crc++
	}
	return &kmspb.PublicKey{
		Pem:             f.pem,
		Algorithm:       f.algorithm,
		PemCrc32C:       wrapperspb.Int64(crc),
		Name:            keyName,
		ProtectionLevel: kmspb.ProtectionLevel_HSM,
	}, nil
}

func (f *fakeKMS) AsymmetricSign(_ context.Context, req *kmspb.AsymmetricSignRequest) (*kmspb.AsymmetricSignResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetName() != keyName {
		return nil, status.Errorf(codes.NotFound, "no key version %s", req.GetName())
	}
	digest := req.GetDigest().GetSha256()
	if len(digest) != 32 || len(req.GetData()) != 0 {
		return nil, status.Error(codes.InvalidArgument, "want a 32-byte SHA-256 digest")
	}
	if req.GetDigestCrc32C() == nil || req.GetDigestCrc32C().GetValue() != checksum(digest) {
		return nil, status.Error(codes.InvalidArgument, "digest_crc32c mismatch")
	}

	// A real ECDSA signature over the digest; KMS returns (r, s) only, in DER.
	sig, err := crypto.Sign(digest, f.key)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	r := new(big.Int).SetBytes(sig[:32])
	s := new(big.Int).SetBytes(sig[32:64])
	if f.highS == highSAlways || (f.highS == highSAlternate && f.signs%2 == 1) {
		s.Sub(secp256k1N, s)
		f.highSServed++
	}
	f.signs++
	der, err := asn1.Marshal(struct{ R, S *big.Int }{r, s})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if f.mangleSig != nil {
		der = f.mangleSig(der)
	}
	crc := checksum(der)
	if f.badSigCRC {
		crc++
	}
	name := keyName
	if f.wrongName {
		name = strings.Replace(keyName, "/1", "/2", 1)
	}
	return &kmspb.AsymmetricSignResponse{
		Signature:            der,
		SignatureCrc32C:      wrapperspb.Int64(crc),
		VerifiedDigestCrc32C: !f.unverifiedDigest,
		Name:                 name,
		ProtectionLevel:      kmspb.ProtectionLevel_HSM,
	}, nil
}

func (f *fakeKMS) set(fn func(f *fakeKMS)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// marshalSPKI builds a PEM SubjectPublicKeyInfo the way KMS serves one.
func marshalSPKI(t *testing.T, algorithm, curve asn1.ObjectIdentifier, point []byte) string {
	t.Helper()
	params, err := asn1.Marshal(curve)
	require.NoError(t, err)
	der, err := asn1.Marshal(struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}{
		Algorithm: pkix.AlgorithmIdentifier{Algorithm: algorithm, Parameters: asn1.RawValue{FullBytes: params}},
		PublicKey: asn1.BitString{Bytes: point, BitLength: 8 * len(point)},
	})
	require.NoError(t, err)
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

type bundle struct {
	kms    *fakeKMS
	client *kmsapi.KeyManagementClient
	key    *ecdsa.PrivateKey
	addr   common.Address
}

// setup serves a fake KMS over a real secp256k1 key on bufconn and returns a
// real KeyManagementClient connected to it.
func setup(t *testing.T) bundle {
	t.Helper()
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	fake := &fakeKMS{
		key:       key,
		pem:       marshalSPKI(t, oidECPublicKey, oidSecp256k1, crypto.FromECDSAPub(&key.PublicKey)),
		algorithm: kmspb.CryptoKeyVersion_EC_SIGN_SECP256K1_SHA256,
	}

	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	kmspb.RegisterKeyManagementServiceServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	client, err := kmsapi.NewKeyManagementClient(context.Background(),
		option.WithGRPCConn(conn), option.WithoutAuthentication())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close(); _ = conn.Close() })

	return bundle{kms: fake, client: client, key: key, addr: crypto.PubkeyToAddress(key.PublicKey)}
}

func TestIssue4_KMSSigner(t *testing.T) {
	ctx := context.Background()
	b := setup(t)

	kmsSigner, err := New(ctx, b.client, keyName)
	require.NoError(t, err)
	local, err := localkey.FromHex(hex.EncodeToString(crypto.FromECDSA(b.key)))
	require.NoError(t, err)
	require.Equal(t, b.addr, kmsSigner.Address(), "KMS address is Keccak of the KMS public key")
	require.Equal(t, local.Address(), kmsSigner.Address(), "same key, same address through both adapters")

	funds := new(big.Int).Mul(big.NewInt(100), big.NewInt(params.Ether))
	backend := simulated.NewBackend(types.GenesisAlloc{b.addr: {Balance: funds}})
	t.Cleanup(func() { _ = backend.Close() })
	client := backend.Client()
	chainID, err := client.ChainID(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1337, chainID.Int64())
	ethSigner := types.LatestSignerForChainID(chainID)

	head, err := client.HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	tip := big.NewInt(params.GWei)
	feeCap := new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2)), tip)
	to := common.HexToAddress("0x00000000000000000000000000000000000000a1")

	type signerCase struct {
		name   string
		signer interface {
			SignTx(context.Context, *types.Transaction, *big.Int) (*types.Transaction, error)
		}
		legacy bool
	}
	// Interleave the two adapters on one nonce sequence: the chain must see a
	// single sender.
	plan := []signerCase{
		{"kms 1559", kmsSigner, false},
		{"kms 1559", kmsSigner, false},
		{"local 1559", local, false},
		{"kms 1559", kmsSigner, false},
		{"kms legacy", kmsSigner, true},
		{"local legacy", local, true},
		{"kms 1559", kmsSigner, false},
		{"kms 1559", kmsSigner, false},
	}
	var sent []*types.Transaction
	for nonce, step := range plan {
		var unsigned *types.Transaction
		if step.legacy {
			unsigned = types.NewTx(&types.LegacyTx{Nonce: uint64(nonce), GasPrice: feeCap, Gas: 21000, To: &to, Value: big.NewInt(int64(nonce + 1))})
		} else {
			unsigned = types.NewTx(&types.DynamicFeeTx{ChainID: chainID, Nonce: uint64(nonce), GasTipCap: tip, GasFeeCap: feeCap, Gas: 21000, To: &to, Value: big.NewInt(int64(nonce + 1))})
		}
		tx, err := step.signer.SignTx(ctx, unsigned, chainID)
		require.NoError(t, err, step.name)
		from, err := types.Sender(ethSigner, tx)
		require.NoError(t, err, step.name)
		require.Equal(t, b.addr, from, step.name)
		_, _, s := tx.RawSignatureValues()
		require.LessOrEqual(t, s.Cmp(secp256k1HalfN), 0, "%s: s must be low", step.name)
		require.NoError(t, client.SendTransaction(ctx, tx), step.name)
		sent = append(sent, tx)
		if nonce%3 == 2 {
			commitPending(t, backend, b.addr, uint64(nonce+1))
		}
	}
	commitPending(t, backend, b.addr, uint64(len(plan)))

	for i, tx := range sent {
		// The backend indexes transactions asynchronously after a commit.
		var receipt *types.Receipt
		require.Eventually(t, func() bool {
			receipt, err = client.TransactionReceipt(ctx, tx.Hash())
			return err == nil
		}, 5*time.Second, 10*time.Millisecond, "tx %d (%s): %v", i, plan[i].name, err)
		assert.Equal(t, types.ReceiptStatusSuccessful, receipt.Status, "tx %d (%s)", i, plan[i].name)
	}
	nonce, err := client.NonceAt(ctx, b.addr, nil)
	require.NoError(t, err)
	assert.EqualValues(t, len(plan), nonce)

	b.kms.set(func(f *fakeKMS) {
		assert.Positive(t, f.highSServed, "the fake must have served high-s signatures")
		assert.Less(t, f.highSServed, f.signs)
	})
}

// commitPending seals a block once the pool has promoted the sender's
// transactions up to nonce want (the pool takes them in asynchronously: a
// block sealed at once may leave the last one out, and nothing seals
// another).
func commitPending(t *testing.T, backend *simulated.Backend, from common.Address, want uint64) {
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := backend.Client().PendingNonceAt(context.Background(), from)
		return err == nil && n >= want
	}, 5*time.Second, 5*time.Millisecond, "the pool never held nonce %d", want-1)
	backend.Commit()
}

func TestNewRejectsChecksumMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.kms.set(func(f *fakeKMS) { f.badPEMCRC = true })
	_, err := New(context.Background(), b.client, keyName)
	require.ErrorIs(t, err, ErrChecksum)
}

func TestSignTxRejectsChecksumMismatch(t *testing.T) {
	t.Parallel()
	cases := map[string]func(f *fakeKMS){
		"signature crc32c":    func(f *fakeKMS) { f.badSigCRC = true },
		"digest not verified": func(f *fakeKMS) { f.unverifiedDigest = true },
		"other key version":   func(f *fakeKMS) { f.wrongName = true },
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			s, err := New(context.Background(), b.client, keyName)
			require.NoError(t, err)
			b.kms.set(corrupt)
			_, err = s.SignTx(context.Background(), sampleTx(), big.NewInt(1337))
			require.ErrorIs(t, err, ErrChecksum)
		})
	}
}

func TestNewRejectsWrongAlgorithm(t *testing.T) {
	t.Parallel()
	for _, alg := range []kmspb.CryptoKeyVersion_CryptoKeyVersionAlgorithm{
		kmspb.CryptoKeyVersion_EC_SIGN_P256_SHA256,
		kmspb.CryptoKeyVersion_RSA_SIGN_PKCS1_2048_SHA256,
		kmspb.CryptoKeyVersion_CRYPTO_KEY_VERSION_ALGORITHM_UNSPECIFIED,
	} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.kms.set(func(f *fakeKMS) { f.algorithm = alg })
			_, err := New(context.Background(), b.client, keyName)
			require.ErrorIs(t, err, ErrAlgorithm)
		})
	}
}

func TestNewRejectsMalformedPEM(t *testing.T) {
	t.Parallel()
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	point := crypto.FromECDSAPub(&key.PublicKey)
	good := marshalSPKI(t, oidECPublicKey, oidSecp256k1, point)
	block, _ := pem.Decode([]byte(good))
	require.NotNil(t, block)
	oidRSA := asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
	oidP256 := asn1.ObjectIdentifier{1, 2, 840, 10045, 3, 1, 7}
	offCurve := append([]byte{}, point...)
	offCurve[64] ^= 1

	cases := map[string]string{
		"empty":            "",
		"not PEM":          "hello",
		"wrong block type": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes})),
		"trailing data":    good + "junk",
		"not DER":          string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{0x30, 0x03, 0x01}})),
		"truncated DER":    string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: block.Bytes[:len(block.Bytes)-5]})),
		"RSA algorithm":    marshalSPKI(t, oidRSA, oidSecp256k1, point),
		"P-256 curve":      marshalSPKI(t, oidECPublicKey, oidP256, point),
		"compressed point": marshalSPKI(t, oidECPublicKey, oidSecp256k1, crypto.CompressPubkey(&key.PublicKey)),
		"point off curve":  marshalSPKI(t, oidECPublicKey, oidSecp256k1, offCurve),
	}
	for name, text := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.kms.set(func(f *fakeKMS) { f.pem = text })
			_, err := New(context.Background(), b.client, keyName)
			require.ErrorIs(t, err, ErrPublicKey)
		})
	}
}

// TestMarshalSPKIMatchesX509 checks the test's SPKI encoder against the
// standard library on a curve x509 knows, so the secp256k1 PEMs the fake
// serves have the real layout.
func TestMarshalSPKIMatchesX509(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	want, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	require.NoError(t, err)
	point, err := key.PublicKey.Bytes()
	require.NoError(t, err)
	got := marshalSPKI(t, oidECPublicKey, asn1.ObjectIdentifier{1, 2, 840, 10045, 3, 1, 7}, point)
	block, _ := pem.Decode([]byte(got))
	require.NotNil(t, block)
	assert.Equal(t, want, block.Bytes)
}

func TestSignTxNormalisesHighS(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.kms.set(func(f *fakeKMS) { f.highS = highSAlways })
	s, err := New(context.Background(), b.client, keyName)
	require.NoError(t, err)
	chainID := big.NewInt(1337)
	for i := range 8 {
		tx, err := s.SignTx(context.Background(), sampleTxNonce(uint64(i)), chainID)
		require.NoError(t, err)
		v, _, sv := tx.RawSignatureValues()
		assert.LessOrEqual(t, sv.Cmp(secp256k1HalfN), 0)
		assert.LessOrEqual(t, v.Uint64(), uint64(1))
		from, err := types.Sender(types.LatestSignerForChainID(chainID), tx)
		require.NoError(t, err)
		assert.Equal(t, b.addr, from)
	}
	b.kms.set(func(f *fakeKMS) { assert.Equal(t, 8, f.highSServed) })
}

func TestSignTxRejectsBadSignature(t *testing.T) {
	t.Parallel()
	other, err := crypto.GenerateKey()
	require.NoError(t, err)
	cases := map[string]func(f *fakeKMS){
		"signed by another key": func(f *fakeKMS) { f.key = other },
		"not DER":               func(f *fakeKMS) { f.mangleSig = func([]byte) []byte { return []byte{0x30, 0x01} } },
		"trailing bytes":        func(f *fakeKMS) { f.mangleSig = func(d []byte) []byte { return append(d, 0) } },
		"r out of range": func(f *fakeKMS) {
			f.mangleSig = func([]byte) []byte {
				d, _ := asn1.Marshal(struct{ R, S *big.Int }{secp256k1N, big.NewInt(1)})
				return d
			}
		},
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			s, err := New(context.Background(), b.client, keyName)
			require.NoError(t, err)
			b.kms.set(corrupt)
			_, err = s.SignTx(context.Background(), sampleTx(), big.NewInt(1337))
			require.ErrorIs(t, err, ErrSignature)
		})
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := New(context.Background(), nil, keyName)
	require.Error(t, err)
	_, err = New(context.Background(), b.client, "projects/p/locations/global/keyRings/r/cryptoKeys/k")
	require.Error(t, err)
	_, err = New(context.Background(), b.client, keyName+"0")
	require.Equal(t, codes.NotFound, status.Code(errors.Unwrap(err)))
}

func sampleTx() *types.Transaction { return sampleTxNonce(0) }

func sampleTxNonce(nonce uint64) *types.Transaction {
	to := common.HexToAddress("0x00000000000000000000000000000000000000a1")
	return types.NewTx(&types.DynamicFeeTx{ChainID: big.NewInt(1337), Nonce: nonce, GasTipCap: big.NewInt(1), GasFeeCap: big.NewInt(2), Gas: 21000, To: &to, Value: big.NewInt(1)})
}
