"""initialize fails, so the model does not load."""


class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("cannot start")
