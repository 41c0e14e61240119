"""Pure renderers: an attempt as a Kubernetes Job or JobSet, the fleet as Kueue objects, an sbatch script,
a SkyPilot task; and the import of an existing Job as a hardware-agnostic Experiment."""
