"""qalib.notebook.catalog is the one registry of notebooks: each entry names its notebook, topic and experiment module
(and so its demos module)."""

import importlib.util
from pathlib import Path

from qalib.notebook.catalog import CATALOG, demo_factories

TOPICS = Path(__file__).resolve().parent.parent / "qalib" / "topics"


def test_every_entry_names_a_notebook_a_topic_an_experiment_and_demos_that_exist():
    for entry in CATALOG:
        assert entry.path.is_file(), f"{entry.file} does not exist"
        assert entry.experiment == entry.topic + "_experiment", f"{entry.file}: {entry.experiment} is not its topic's"
        for module in (entry.topic, entry.experiment, entry.demos):
            assert importlib.util.find_spec(module) is not None, f"{entry.file}: no module {module}"


def test_every_module_in_qalib_topics_is_named_by_exactly_one_entry():
    named = [m for entry in CATALOG for m in (entry.topic, entry.experiment, entry.demos)]
    modules = sorted(f"qalib.topics.{p.stem}" for p in TOPICS.glob("*.py") if p.stem != "__init__")
    assert sorted(named) == modules


def test_demo_factories_collect_the_demos_of_every_entry():
    from qalib.topics import multi_head_demos

    factories = demo_factories()
    assert list(factories) == [entry.file.removesuffix(".ipynb") for entry in CATALOG]
    assert all(factories.values()), "every notebook has at least one demo"
    assert factories["07_multi_head"] == multi_head_demos.DEMOS
