# Private networking: Cloud SQL has a private IP only, in a VPC of its own
# that nothing else uses, and the functions reach it with Direct VPC egress.
#
#   VPC txfence (no auto subnets)
#     subnet txfence-run (var.run_subnet_cidr)   Cloud Run instances' addresses
#                                                (Direct VPC egress: one IP per
#                                                instance, so /24 covers the
#                                                default maxima with room for
#                                                rollouts)
#     private services access range              Cloud SQL's private IP
#       txfence-sql (var.sql_psa_prefix_length)  (VPC peering with Google's
#                                                service producer network)
#
# Egress is PRIVATE_RANGES_ONLY: only traffic to private addresses (Cloud
# SQL) goes through the VPC; the RPC endpoints on the internet and Google's
# APIs (Pub/Sub, KMS, Secret Manager, the Cloud SQL Admin API the connector
# asks for certificates) are reached directly, so no Cloud NAT is needed.
# The Cloud SQL Go connector still authorizes every connection through IAM
# (roles/cloudsql.client) and encrypts it (mTLS); the functions dial the
# private IP (TXFENCE_CLOUDSQL_PRIVATE_IP=true, main.tf).
#
# No firewall rule is needed: egress is allowed by default, and Cloud SQL
# sits in the peered producer network, not behind this VPC's ingress rules.

resource "google_compute_network" "txfence" {
  name                    = var.network_name
  auto_create_subnetworks = false
  routing_mode            = "REGIONAL"

  depends_on = [google_project_service.apis]
}

resource "google_compute_subnetwork" "run" {
  name          = "${var.network_name}-run"
  region        = var.region
  network       = google_compute_network.txfence.id
  ip_cidr_range = var.run_subnet_cidr

  # Lets anything in the subnet reach Google APIs without an external IP
  # (only used if egress is ever switched to ALL_TRAFFIC).
  private_ip_google_access = true
}

# Private services access: an internal range that Google's service producer
# network (where Cloud SQL instances live) takes its addresses from.
resource "google_compute_global_address" "sql_psa" {
  name          = "${var.network_name}-sql"
  purpose       = "VPC_PEERING"
  address_type  = "INTERNAL"
  prefix_length = var.sql_psa_prefix_length
  network       = google_compute_network.txfence.id
}

resource "google_service_networking_connection" "sql" {
  network                 = google_compute_network.txfence.id
  service                 = "servicenetworking.googleapis.com"
  reserved_peering_ranges = [google_compute_global_address.sql_psa.name]

  # Deleting the peering while Cloud SQL still uses it fails; abandon it
  # instead, it goes with the network.
  deletion_policy = "ABANDON"

  depends_on = [google_project_service.apis]
}

locals {
  # Direct VPC egress of every service and of the migrate job.
  vpc_egress = {
    network    = google_compute_network.txfence.id
    subnetwork = google_compute_subnetwork.run.id
    egress     = "PRIVATE_RANGES_ONLY"
  }
}
