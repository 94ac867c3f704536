"""mmport under pytest: a manifest's ports and checks as test items (the ``pytest11`` plugin's collectors).

:mod:`mmport.pytest_plugin` is the entry point pytest loads; it imports this
package only when a manifest is configured. Here: the collectors
(:mod:`mmport.testing.items`), the plugin object that owns them
(:mod:`mmport.testing.plugin`) and the split of ports into CI shards
(:mod:`mmport.testing.shard`). docs/ci.md shows them at work.
"""

from __future__ import annotations

__all__: list[str] = []
