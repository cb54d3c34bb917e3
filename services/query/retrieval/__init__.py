"""The read path: routes, fusion, post-processing (scoring) and per-route breakers."""
