"""The trn1 double's platform rules and compile cache, shared by its torch_neuronx and its tools."""
