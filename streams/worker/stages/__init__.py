"""The worker's pipeline stages, one module each, in data-flow order:

config    chorus.channel-config ─► config table (read by every stage; both roles)
fold      (fold role) chorus.messages ─► validate ─► projections ─► fold tables ─►
          chorus.driver-events (bad input ─► chorus.dead-letters)
expiry    (fold role) timer: overdue commitments in the fold ─► expiry EVENTs ─► chorus.messages
stalls    (fold role) timer: a partition whose consumer stopped delivering ─► seek back
feed      (context role) chorus.messages ─► validate ─► its followers, in the same batch:
summaries   pending batch ─► summariser task ─► chorus.summaries, read back by its own
            follower (the latest of each channel, in memory: what the next batch builds on)
recaps      phase + deadline ─► timer ─► recap task ─► chorus.recaps, read back by its own
            agent into the channel state (the phase and the latest recap)
recent    (fold role) each record the fold takes ─► its channel's last records, for the
          views (which read the latest summaries and recaps from their topics:
          `streams.worker.latest`)
shadow    (fold role) now and then, a sample of channels re-folded from the log and compared

Each has an `install(runtime, ...)`; `streams.worker.compose.build_worker` calls them.
"""
