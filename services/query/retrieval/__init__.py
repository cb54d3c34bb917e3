"""The read path: the retriever and its stages (routes, fuse, expand, load, rank, alerts), one
module per route, and the routes' breakers."""
