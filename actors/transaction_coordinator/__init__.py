"""The transaction coordinator of one `__transaction_state` partition (KIP-98): a pure core for now (issue 19)."""
