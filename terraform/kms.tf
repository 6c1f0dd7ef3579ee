# Signer keys in Cloud KMS. The private keys never leave the HSM; only the
# signing functions may sign with them: Submit (first attempts) and
# ResubmitSweep (fee bumps, cancels, placeholders). Rebroadcasts reuse the
# persisted raw bytes, so nothing else needs a key.
#
# Two ways to provide signers, combinable:
#   - bring your own key versions: list them in var.signers;
#   - let this module create var.signer_keys keys (below). Their Ethereum
#     addresses exist only once the keys do (Keccak-256 of the public key,
#     which terraform cannot compute), so after the apply that creates them,
#     derive the addresses (README, "Signer keys") and add them to
#     var.signers; the next apply hands them to the functions.

locals {
  kms_location = coalesce(var.kms_location, var.region)

  # Names of the keys created here, computed from inputs only so they are
  # known at plan time (for_each keys below must be).
  created_key_ids = [
    for i in range(var.signer_keys) :
    "projects/${var.project}/locations/${local.kms_location}/keyRings/${var.kms_key_ring}/cryptoKeys/txfence-signer-${i}"
  ]

  # Keys of var.signers (a key version name minus "/cryptoKeyVersions/N").
  signer_key_ids = [for s in var.signers : regex("^(.+)/cryptoKeyVersions/[0-9]+$", s.kms_key_version)[0]]

  # Every key Submit may use: created and brought, once each.
  submit_key_ids = toset(concat(local.created_key_ids, local.signer_key_ids))

  # The signing functions' grants (every function whose `signs` is true:
  # Submit, and ResubmitSweep for fee bumps, cancels and placeholders): sign
  # (cryptoKeyVersions.useToSign) and read the public key (viewPublicKey;
  # shared/kms derives and checks the address from it). Two narrow roles
  # rather than signerVerifier, which also allows verify.
  signing_functions = [for k, f in local.functions : k if f.signs]
  kms_submit_bindings = {
    for triple in setproduct(local.signing_functions, tolist(local.submit_key_ids), ["roles/cloudkms.signer", "roles/cloudkms.publicKeyViewer"]) :
    "${triple[0]}|${triple[1]}|${triple[2]}" => { function = triple[0], key = triple[1], role = triple[2] }
  }
}

resource "google_kms_key_ring" "signers" {
  count = var.signer_keys > 0 ? 1 : 0

  name     = var.kms_key_ring
  location = local.kms_location

  depends_on = [google_project_service.apis]
}

resource "google_kms_crypto_key" "signer" {
  count = var.signer_keys

  name     = "txfence-signer-${count.index}"
  key_ring = google_kms_key_ring.signers[0].id
  purpose  = "ASYMMETRIC_SIGN"

  # secp256k1 (Ethereum's curve) is offered by Cloud KMS at the HSM level
  # only. Version 1 is created with the key; it is the version to use.
  version_template {
    algorithm        = "EC_SIGN_SECP256K1_SHA256"
    protection_level = "HSM"
  }

  # A signer key is an on-chain identity holding funds and nonces: never
  # let a plan destroy it. (Lowering signer_keys fails on this on purpose.)
  lifecycle {
    prevent_destroy = true
  }
}

# Version 1 of each created key, for its public key (outputs).
data "google_kms_crypto_key_version" "signer" {
  count = var.signer_keys

  crypto_key = google_kms_crypto_key.signer[count.index].id
  version    = 1
}

resource "google_kms_crypto_key_iam_member" "submit" {
  for_each = local.kms_submit_bindings

  crypto_key_id = each.value.key
  role          = each.value.role
  member        = "serviceAccount:${google_service_account.runtime[each.value.function].email}"

  depends_on = [google_kms_crypto_key.signer]
}
