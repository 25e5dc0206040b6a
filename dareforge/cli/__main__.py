from dareforge.cli import app

app()
