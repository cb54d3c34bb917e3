"""The pure model of Palimpsest: aggregates, their events, and the rules they obey. No I/O."""
