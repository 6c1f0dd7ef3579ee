# Terraform and provider requirements, and where state lives.
#
# The GCS backend is deliberately left empty: the bucket and prefix are
# given at init time, so the same module can serve several environments:
#
#   terraform init -backend-config="bucket=my-tf-state" -backend-config="prefix=txfence/prod"

terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.0"
    }
  }

  backend "gcs" {}
}

provider "google" {
  project = var.project
  region  = var.region

  default_labels = {
    app = "txfence"
  }
}
