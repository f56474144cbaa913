"""Trained weights of the GNN planner (``hulk-gnn.pt``) and their settings (``.json``)."""
