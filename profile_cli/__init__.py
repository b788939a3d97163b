"""Typer CLI of nsys-mine. Commands are thin: parse options, call one library function, render."""
