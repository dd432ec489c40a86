"""For instructors and `make notebooks`: executing the workbook as a class would, the graphs it
compiles, the classroom compile cache, reset. Notebooks 02-07 import only `graph_list` (the graphs
behind each one's compile count); nothing else imports it but its tests."""
