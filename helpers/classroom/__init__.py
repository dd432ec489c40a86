"""For instructors and `make notebooks`, no notebook: executing the workbook as a class would, the
graphs it compiles (graph_log, graph_record), the classroom compile cache, reset. Imports
mnist_mlp, helpers.cache, helpers.setup and helpers.launch; nothing imports it but its tests."""
