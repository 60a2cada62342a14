"""The raw-HTTP fuzz harness of the robustness tier: request strategies (`probes`),
the checks of one exchange (`exchange`) and its example budget (`budget`)."""
