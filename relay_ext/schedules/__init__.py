"""What each task of a model is compiled with: its fastest buildable tuned record
(:mod:`.records`), the rules' design with decisions computed from the shape and the target, no
search (:mod:`.rule_designs`), and the per-task choice among those and TVM's default schedule,
timed here (:mod:`.task_choice`, on the inputs :mod:`.task_inputs` makes)."""
