"""Mesh, logical-axis rules and shardings (see `mesh.py`)."""

from jaxlab.parallel.mesh import (DEFAULT_RULES, MESH_AXES, abstract_model,
                                  batch_mesh, batch_sharding, batch_spec,
                                  create_sharded, logical_to_spec, make_mesh,
                                  maybe_initialize_distributed,
                                  mesh_from_config, mesh_shape,
                                  rules_from_config, shard_params)
