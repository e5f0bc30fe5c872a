"""One-line messages: a framework's multi-line error becomes one line that still says why."""

from __future__ import annotations

from opbench.core.errors import first_line, one_line

# The layout of TensorFlow's errors from a tf.function (a heading, where the node was defined, then
# the cause): the distributed step of MultiWorkerMirroredStrategy failed with only the heading.
TF_GRAPH_ERROR = """Graph execution error:

Detected at node CollectiveReduceV2 defined at (most recent call last):
  File "/venv/lib/python3.11/site-packages/opbench/frameworks/tensorflow/mwms.py", line 80, in step

Collective ops is aborted by: failed to connect to all addresses
The error could be from a previous operation. Restart your program to reset.
\t [[{{node CollectiveReduceV2}}]] [Op:__inference_step_1234]"""


class InternalError(Exception):
    pass


def test_a_heading_gets_the_cause_below_it():
    assert one_line(InternalError(TF_GRAPH_ERROR)) == (
        "InternalError: Graph execution error: Collective ops is aborted by: failed to connect to all addresses")


def test_an_ordinary_message_keeps_its_first_line_and_its_limit():
    assert first_line(ValueError("shapes differ\nmore detail")) == "shapes differ"
    assert first_line(ValueError("x" * 500), limit=10) == "x" * 10
    assert first_line(ValueError("nothing below:")) == "nothing below:"
    assert one_line(KeyError()) == "KeyError"
