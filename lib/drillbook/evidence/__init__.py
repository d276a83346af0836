"""Evidence that an auditor can trust: write-once bundles, a hash chain, signatures, verify, report.

- `bundle`: BundleWriter (atomic, write-once files; manifest; signing); `ledger`: the chain
- `verify`: verify_path — digests, chain, signatures against trusted keys, each problem named
- `anchor`: the signed ledger head kept outside the results folder (witness file, `drillbook head`)
- `report`: the self-contained HTML report; `catalog`: bundles as rows for `drillbook list`
- `redact`: secrets kept out by name and by value; `signing`: Ed25519 keys
"""

from drillbook.evidence.bundle import BundleExists, BundleWriter, EvidenceError, SealedBundle
from drillbook.evidence.catalog import BundleRow, list_bundles
from drillbook.evidence.summary import RunSummary, SloCheck
from drillbook.evidence.verify import Finding, VerifyReport, verify_path

__all__ = ["BundleExists", "BundleRow", "BundleWriter", "EvidenceError", "Finding", "RunSummary", "SealedBundle",
           "SloCheck", "VerifyReport", "list_bundles", "verify_path"]
