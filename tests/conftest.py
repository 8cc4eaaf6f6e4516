import os

os.environ.setdefault("TOPHUB_LOCATION", "NONE")
