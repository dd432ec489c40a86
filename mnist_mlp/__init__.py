"""The workbook's runtime: the stage scripts and what they share. Importing it changes no global
state: what a process must do at its start is mnist_mlp.startup.freeze_startup_objects()."""
