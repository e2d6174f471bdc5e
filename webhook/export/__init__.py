"""`placer export`: SchedulingPolicies as MutatingAdmissionPolicies the API server runs itself (no webhook)."""
