"""Pure rules: plain data in, plain data out, no clock and no database."""
