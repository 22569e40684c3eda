"""The console commands: argv -> reading -> render."""
