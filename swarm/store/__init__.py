"""Where verified blocks live: the store contract, its bookkeeping, the memory and disk stores."""
