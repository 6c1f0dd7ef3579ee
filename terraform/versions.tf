# Provider requirements of the txfence module. The module configures no
# provider and no backend: each root under environments/ does (its own
# provider "google" block, project, region and default labels, and its own
# GCS backend).
#
# The google provider's major version is the one make tf-validate builds and
# validates against (terraform/tools/provider-google pins a commit of the
# 8.0.0 release; README, "Validation"). Raise both together.

terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 8.0"
    }
  }
}
