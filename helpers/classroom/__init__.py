"""For instructors and `make notebooks`, no notebook: executing the workbook as a class would,
the graphs it compiles, the classroom compile cache, reset. Nothing imports it but its tests.

Modules: commands (`python -m helpers.classroom notebooks|reset|cache|check`), notebook_pass
(executing the workbook: `make notebooks`, the classroom cache and its check), reset (`make
reset`), graph_log and graph_record (the graphs a run compiles, and the committed record of them),
time_budget (each notebook's reading time and compile wait on a trn1, the one table the docs state).

Imports: mnist_mlp, helpers.cache, helpers.launch and helpers.show.
"""
