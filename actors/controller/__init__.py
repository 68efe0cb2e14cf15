"""The controller (seed 004): one actor (`controller.ControllerActor`) that owns broker liveness,
elections, ISR changes, controlled shutdown, topics and producer ids, writing every decision to
its metadata log first. `model` is the durable state its records build; the modules named after
a concern (liveness, elections, alter_partition, shutdown, topic_creation, topic_deletion,
producer_ids, outbox) are functions of the actor's state, not actors; `channel` carries its
requests to the brokers. controller.py's docstring has the map.
"""
