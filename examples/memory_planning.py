"""Run: python examples/memory_planning.py

Plans the memory of a Dist-MoE context without a GPU: a DeepSeek-V3-sized layer at EP16 with the
minimum activation slot, a 16 GiB slot and a balanced slot, then a small two-rank test context.
"""

import dist_moe


def main():
    base = dict(max_num_local_input_tokens=4096, hidden_dim=7168, intermediate_dim=2048, top_k=8, num_experts=256,
                max_moe_layers_per_activation_slot=4)
    for label, extra in (
        ("minimum slot (recompute everything)", dict(activation_slot_capacity_factor=0.0)),
        ("16 GiB slot", dict(activation_slot_bytes=16 << 30)),
        ("balanced slot (factor 1.0)", dict(activation_slot_capacity_factor=1.0)),
    ):
        plan = dist_moe.plan_memory(dist_moe.Config(**base, **extra), ep_size=16)
        print(f"== DSv3 layer, EP16, {label}")
        print(plan.explain())
        print()
    small = dist_moe.Config(max_num_local_input_tokens=16, hidden_dim=256, intermediate_dim=256, top_k=2,
                            num_experts=8, max_moe_layers_per_activation_slot=2, num_activation_slots=2)
    plan = dist_moe.plan_memory(small, ep_size=2)
    print("== examples/bf16_training.py context, EP2")
    print(plan.explain())
    windows = plan.routing_window_bytes + plan.dispatch_window_bytes + plan.combine_window_bytes
    print(f"per rank: activation buffer {plan.total_device_buffer_bytes} bytes, symmetric windows {windows} bytes")


if __name__ == "__main__":
    main()
