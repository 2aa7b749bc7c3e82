"""One module per CLI verb; each is thin: check options, call the library, hand to a reporter."""
