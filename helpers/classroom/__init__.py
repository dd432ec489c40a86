"""For instructors and `make notebooks`, no notebook: executing the workbook as a class would,
the graphs it compiles, the classroom compile cache, reset. Nothing imports it but its tests."""
