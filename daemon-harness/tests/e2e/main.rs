//! The end-to-end scenarios (feature `bcd-e2e`).
